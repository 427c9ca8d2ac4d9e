package schedules

import (
	"fmt"
	"time"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/workflows/platform"
)

// compressCountCap bounds how many missed intervals a compress Reason counts;
// the window itself is exact however long the outage was.
const compressCountCap = 1000

// Plan applies a cron trigger's misfire policy to the fire scheduled for
// scheduledFor, as seen at now: whether it runs, and the window of time its
// run covers. Let prev be the fire before scheduledFor, grace =
// Grace(scheduledFor-prev) and D the number of fires after scheduledFor that
// are due by now:
//
//   - skip runs iff D == 0 and the fire is at most grace late; window [prev, scheduledFor].
//   - catchup runs iff D < catchup_limit, so the newest catchup_limit fires of
//     an outage run and older ones are dropped; window [prev, scheduledFor].
//   - compress runs iff D == 0, so only the newest due fire runs; its window
//     starts at lastWindowEnd (the end of the activity's last recorded window)
//     when that is set and before prev, else at prev, and ends at scheduledFor.
//
// Plan is pure (no clock, no I/O), so the fire workflow's activity and tests
// call it alike; every decision carries a Reason for the log. Windows are UTC.
func Plan(c contracts.CronTrigger, scheduledFor, now time.Time, lastWindowEnd *time.Time) (platform.FirePlan, error) {
	s, err := parse(c)
	if err != nil {
		return platform.FirePlan{}, err
	}
	f := scheduledFor.UTC()
	prev, err := s.prev(f)
	if err != nil {
		return platform.FirePlan{}, fmt.Errorf("planning the fire at %s: %w", f.Format(time.RFC3339), err)
	}
	plan := platform.FirePlan{WindowStart: prev, WindowEnd: f}
	late := max(now.Sub(f), 0)
	lateText := late.Round(time.Millisecond) // for the Reason only

	switch c.MisfirePolicy {
	case contracts.MisfireSkip:
		grace := Grace(f.Sub(prev))
		due, next := s.due(f, now, 1)
		switch {
		case due > 0:
			plan.Reason = fmt.Sprintf("skip: fire is %v late, the later fire at %s is already due", lateText, stamp(next))
		case late > grace:
			plan.Reason = fmt.Sprintf("skip: fire is %v late (grace %v)", lateText, grace)
		default:
			plan.Run = true
			plan.Reason = fmt.Sprintf("skip: on time (%v late, grace %v)", lateText, grace)
		}
	case contracts.MisfireCatchup:
		limit := catchupLimit(c)
		due, _ := s.due(f, now, limit)
		if due >= limit {
			plan.Reason = fmt.Sprintf("catchup: %d or more later fires are due, limit %d: only the newest %d run", due, limit, limit)
			break
		}
		plan.Run = true
		if due == 0 {
			plan.Reason = fmt.Sprintf("catchup: latest due fire (%v late)", lateText)
		} else {
			plan.Reason = fmt.Sprintf("catchup: replaying a missed fire, %d later fires are due, limit %d", due, limit)
		}
	case contracts.MisfireCompress:
		due, next := s.due(f, now, 1)
		if due > 0 {
			plan.Reason = fmt.Sprintf("compress: the later fire at %s is already due and covers this interval", stamp(next))
			break
		}
		plan.Run = true
		if lastWindowEnd == nil || !lastWindowEnd.Before(prev) {
			plan.Reason = fmt.Sprintf("compress: latest due fire (%v late), one interval", lateText)
			break
		}
		plan.WindowStart = lastWindowEnd.UTC()
		missed, _ := s.due(plan.WindowStart, prev, compressCountCap)
		count := fmt.Sprint(missed + 1)
		if missed == compressCountCap {
			count = fmt.Sprintf("more than %d", compressCountCap)
		}
		plan.Reason = fmt.Sprintf("compress: window widened back to %s to cover %s intervals", stamp(plan.WindowStart), count)
	default:
		return platform.FirePlan{}, fmt.Errorf("misfire policy %q: want %q, %q or %q", c.MisfirePolicy, contracts.MisfireSkip, contracts.MisfireCatchup, contracts.MisfireCompress)
	}
	return plan, nil
}

// stamp formats a time for a Reason.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
