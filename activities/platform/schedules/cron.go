package schedules

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/entityflow/entityflow/contracts"
)

// maxLookBack bounds the backwards search for the fire before a time: a
// five-field cron that fires at all fires at least once in eight years (Feb 29
// is the rarest day it can name).
const maxLookBack = 8 * 366 * 24 * time.Hour

// maxLookAheadYears bounds the forward search for the next fire, for the same reason.
const maxLookAheadYears = 8

// intervalSample is how many consecutive gaps Interval looks at: ten fires of
// a weekdays-only cron always span a weekend, ten of a monthly one a 31-day month.
const intervalSample = 10

// schedule is a parsed cron trigger, evaluated in its time zone.
type schedule struct {
	spec *cron.SpecSchedule
	loc  *time.Location
	expr string
	tz   string
}

// timezone returns the trigger's time zone, contracts.DefaultTimezone when it
// names none.
func timezone(c contracts.CronTrigger) string {
	if c.Timezone == "" {
		return contracts.DefaultTimezone
	}
	return c.Timezone
}

// catchupLimit returns the trigger's catchup_limit, contracts.DefaultCatchupLimit
// when unset.
func catchupLimit(c contracts.CronTrigger) int {
	if c.CatchupLimit <= 0 {
		return contracts.DefaultCatchupLimit
	}
	return c.CatchupLimit
}

// parse reads a trigger's five-field expression in its time zone with
// robfig/cron's parser. It refuses what robfig and the Temporal server would
// read differently: a time zone inside the expression (the trigger's timezone
// field names it), descriptors such as "@every" (robfig counts them from now,
// Temporal from the epoch) and "?" (Temporal has none).
func parse(c contracts.CronTrigger) (schedule, error) {
	expr := strings.TrimSpace(c.Expression)
	switch {
	case expr == "":
		return schedule{}, errors.New("cron expression is empty")
	case strings.Contains(expr, "TZ="):
		return schedule{}, fmt.Errorf("cron expression %q: name the time zone in the timezone field, not in the expression", expr)
	case strings.HasPrefix(expr, "@"):
		return schedule{}, fmt.Errorf("cron expression %q: descriptors are not supported, use five fields", expr)
	case strings.Contains(expr, "?"):
		return schedule{}, fmt.Errorf("cron expression %q: use * instead of ?", expr)
	case len(strings.Fields(expr)) != 5:
		return schedule{}, fmt.Errorf("cron expression %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", expr, len(strings.Fields(expr)))
	}
	tz := timezone(c)
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return schedule{}, fmt.Errorf("cron timezone %q: %w", tz, err)
	}
	parsed, err := cron.ParseStandard(expr)
	if err != nil {
		return schedule{}, fmt.Errorf("cron expression %q: %w", expr, err)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return schedule{}, fmt.Errorf("cron expression %q: not a calendar expression", expr)
	}
	return schedule{spec: spec, loc: loc, expr: expr, tz: tz}, nil
}

// next returns the first fire strictly after t, in UTC, or the zero time if
// there is none within maxLookAheadYears.
//
// It is the Temporal server's own calendar matching (service/worker/scheduler,
// compiledCalendar.next, server 1.29) over robfig's parsed fields, so the
// planner and the server agree on every fire time. robfig's own Next differs
// in two ways: it fires a day-of-month/day-of-week pair on either (the server
// on both), and it fires a daily time in the repeated hour of a DST change
// twice (the server once). Day of month and day of week must both match; a
// time skipped by a DST change does not fire.
func (s schedule) next(t time.Time) time.Time {
	ts := t.In(s.loc)
	y, mo, d := ts.Date()
	h, m, sec := ts.Clock()
	limit := y + maxLookAheadYears
	dstOffset := time.Duration(0)
	if ts.Add(-time.Hour).Hour() == h {
		dstOffset = time.Hour // in the second copy of an hour a DST change repeats
	}
	sec++
	for {
		if sec >= 60 {
			m, sec = m+1, 0
		}
		if m >= 60 {
			before := time.Date(y, mo, d, h, 0, 0, 0, s.loc)
			h, m = h+1, 0
			after := time.Date(y, mo, d, h, 0, 0, 0, s.loc)
			if dstOffset == 0 && after.Sub(before) > time.Hour {
				h, dstOffset = h-1, time.Hour // run through the repeated hour again
			} else {
				dstOffset = 0
			}
		}
		if h >= 24 {
			d, h = d+1, 0
		}
		if d > daysIn(mo, y) {
			mo, d = mo+1, 1
		}
		if mo > time.December {
			y, mo = y+1, time.January
		}
		if y > limit {
			return time.Time{}
		}
		if !matches(s.spec.Month, int(mo)) {
			mo, d, h, m, sec, dstOffset = mo+1, 1, 0, 0, 0, 0
			continue
		}
		if !matches(s.spec.Dom, d) || !matches(s.spec.Dow, int(time.Date(y, mo, d, 12, 0, 0, 0, s.loc).Weekday())) {
			d, h, m, sec, dstOffset = d+1, 0, 0, 0, 0
			continue
		}
		if !matches(s.spec.Hour, h) {
			h, m, sec, dstOffset = h+1, 0, 0, 0
			continue
		}
		if !matches(s.spec.Minute, m) {
			m, sec = m+1, 0
			continue
		}
		if !matches(s.spec.Second, sec) {
			sec++
			continue
		}
		fire := time.Date(y, mo, d, h, m, sec, 0, s.loc)
		if fire.Hour() != h {
			h, m, sec = h+1, 0, 0 // a wall time skipped by a DST change
			continue
		}
		return fire.Add(dstOffset).UTC()
	}
}

// matches says whether value is set in one of robfig's field bitsets.
func matches(bits uint64, value int) bool { return bits&(1<<uint(value)) != 0 }

// daysIn returns the number of days of month mo in year y (mo may run one past
// December while next normalises it).
func daysIn(mo time.Month, y int) int {
	return time.Date(y, mo+1, 0, 12, 0, 0, 0, time.UTC).Day()
}

// prev returns the last fire strictly before t. There is no Prev to call, so
// it looks back a minute, then twice as far, and so on up to maxLookBack, and
// walks forward from the first fire of the first window that holds one.
func (s schedule) prev(t time.Time) (time.Time, error) {
	for back := time.Minute; back <= maxLookBack; back *= 2 {
		fire := s.next(t.Add(-back - time.Second))
		if fire.IsZero() || !fire.Before(t) {
			continue
		}
		for {
			n := s.next(fire)
			if n.IsZero() || !n.Before(t) {
				return fire, nil
			}
			fire = n
		}
	}
	return time.Time{}, fmt.Errorf("cron expression %q (%s): no fire within 8 years before %s", s.expr, s.tz, stamp(t))
}

// due counts the fires t with after < t <= now, stopping at limit, and returns
// the first of them (zero when there is none).
func (s schedule) due(after, now time.Time, limit int) (int, time.Time) {
	var (
		n     int
		first time.Time
	)
	for t := s.next(after); n < limit && !t.IsZero() && !t.After(now); t = s.next(t) {
		if n == 0 {
			first = t
		}
		n++
	}
	return n, first
}

// Interval returns the longest gap between consecutive fires among the
// intervalSample gaps after around. For a regular cron it is the period; for
// an irregular one (weekdays only, monthly) it is the longest gap, so the
// catchup windows Options derives from it cover a weekend or a long month.
func Interval(c contracts.CronTrigger, around time.Time) (time.Duration, error) {
	s, err := parse(c)
	if err != nil {
		return 0, err
	}
	return s.interval(around)
}

// interval is Interval on a parsed schedule.
func (s schedule) interval(around time.Time) (time.Duration, error) {
	var longest time.Duration
	t := s.next(around)
	for range intervalSample {
		if t.IsZero() {
			break
		}
		n := s.next(t)
		if n.IsZero() {
			break
		}
		longest = max(longest, n.Sub(t))
		t = n
	}
	if longest == 0 {
		return 0, fmt.Errorf("cron expression %q (%s): fires fewer than twice in the %d years after %s", s.expr, s.tz, maxLookAheadYears, stamp(around))
	}
	return longest, nil
}

// MinGrace is the smallest grace: Temporal refuses catchup windows below 10s.
const MinGrace = 10 * time.Second

// Grace is how late a fire may reach a worker and still count as on time
// under the skip policy: a tenth of the cron interval, but at least MinGrace,
// so a slow worker or a busy server does not drop fires of a minutely cron.
func Grace(interval time.Duration) time.Duration {
	return max(MinGrace, interval/10)
}
