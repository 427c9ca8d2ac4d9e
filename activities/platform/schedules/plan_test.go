package schedules

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/contracts"
)

// at parses an RFC 3339 time for a test table.
func at(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return ts
}

// decision is what a test expects of one fire: dropped, or run over [start, end].
type decision struct {
	fire       string
	run        bool
	start, end string
}

// runs is a fire that runs over [start, end].
func runs(fire, start, end string) decision {
	return decision{fire: fire, run: true, start: start, end: end}
}

// drops is a fire that is dropped.
func drops(fire string) decision { return decision{fire: fire} }

func TestPlan(t *testing.T) {
	minutely := func(policy string, limit int) contracts.CronTrigger {
		return contracts.CronTrigger{Expression: "* * * * *", MisfirePolicy: policy, CatchupLimit: limit}
	}
	hourly := func(policy string, limit int) contracts.CronTrigger {
		return contracts.CronTrigger{Expression: "0 * * * *", Timezone: "UTC", MisfirePolicy: policy, CatchupLimit: limit}
	}
	weekdays := func(policy string, limit int) contracts.CronTrigger {
		return contracts.CronTrigger{Expression: "0 9 * * 1-5", Timezone: "Europe/Berlin", MisfirePolicy: policy, CatchupLimit: limit}
	}
	quarterly := func(policy string) contracts.CronTrigger {
		return contracts.CronTrigger{Expression: "*/15 * * * *", MisfirePolicy: policy}
	}

	tests := []struct {
		name          string
		trigger       contracts.CronTrigger
		now           string
		lastWindowEnd string
		want          []decision
	}{
		// On time: every policy runs the fire over its interval.
		{"skip on time", minutely("skip", 0), "2026-03-02T10:05:02Z", "",
			[]decision{runs("2026-03-02T10:05:00Z", "2026-03-02T10:04:00Z", "2026-03-02T10:05:00Z")}},
		{"catchup on time", minutely("catchup", 0), "2026-03-02T10:05:02Z", "",
			[]decision{runs("2026-03-02T10:05:00Z", "2026-03-02T10:04:00Z", "2026-03-02T10:05:00Z")}},
		{"compress on time", minutely("compress", 0), "2026-03-02T10:05:02Z", "2026-03-02T10:04:00Z",
			[]decision{runs("2026-03-02T10:05:00Z", "2026-03-02T10:04:00Z", "2026-03-02T10:05:00Z")}},
		{"clock behind the server", minutely("skip", 0), "2026-03-02T10:04:58Z", "",
			[]decision{runs("2026-03-02T10:05:00Z", "2026-03-02T10:04:00Z", "2026-03-02T10:05:00Z")}},

		// Late within the grace (10s for a minutely cron, 6m for an hourly one).
		{"skip minutely 10s late", minutely("skip", 0), "2026-03-02T10:05:10Z", "",
			[]decision{runs("2026-03-02T10:05:00Z", "2026-03-02T10:04:00Z", "2026-03-02T10:05:00Z")}},
		{"skip minutely 11s late", minutely("skip", 0), "2026-03-02T10:05:11Z", "",
			[]decision{drops("2026-03-02T10:05:00Z")}},
		{"skip hourly 5m59s late", hourly("skip", 0), "2026-03-02T10:05:59Z", "",
			[]decision{runs("2026-03-02T10:00:00Z", "2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z")}},
		{"skip hourly 6m1s late", hourly("skip", 0), "2026-03-02T10:06:01Z", "",
			[]decision{drops("2026-03-02T10:00:00Z")}},
		{"catchup hourly 59m late", hourly("catchup", 0), "2026-03-02T10:59:00Z", "",
			[]decision{runs("2026-03-02T10:00:00Z", "2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z")}},
		{"skip */15 89s late", quarterly("skip"), "2026-03-02T10:16:29Z", "",
			[]decision{runs("2026-03-02T10:15:00Z", "2026-03-02T10:00:00Z", "2026-03-02T10:15:00Z")}},
		{"skip */15 91s late", quarterly("skip"), "2026-03-02T10:16:31Z", "",
			[]decision{drops("2026-03-02T10:15:00Z")}},
		{"compress */15 14m late", quarterly("compress"), "2026-03-02T10:29:00Z", "",
			[]decision{runs("2026-03-02T10:15:00Z", "2026-03-02T10:00:00Z", "2026-03-02T10:15:00Z")}},

		// Outage: fires 10:01..10:05 of a minutely cron reach the worker at 10:05:40.
		{"minutely outage skip", minutely("skip", 0), "2026-03-02T10:05:40Z", "", []decision{
			drops("2026-03-02T10:01:00Z"),
			drops("2026-03-02T10:02:00Z"),
			drops("2026-03-02T10:03:00Z"),
			drops("2026-03-02T10:04:00Z"),
			drops("2026-03-02T10:05:00Z"),
		}},
		{"minutely outage catchup limit 10 (default)", minutely("catchup", 0), "2026-03-02T10:05:40Z", "", []decision{
			runs("2026-03-02T10:01:00Z", "2026-03-02T10:00:00Z", "2026-03-02T10:01:00Z"),
			runs("2026-03-02T10:02:00Z", "2026-03-02T10:01:00Z", "2026-03-02T10:02:00Z"),
			runs("2026-03-02T10:03:00Z", "2026-03-02T10:02:00Z", "2026-03-02T10:03:00Z"),
			runs("2026-03-02T10:04:00Z", "2026-03-02T10:03:00Z", "2026-03-02T10:04:00Z"),
			runs("2026-03-02T10:05:00Z", "2026-03-02T10:04:00Z", "2026-03-02T10:05:00Z"),
		}},
		{"minutely outage catchup limit 3", minutely("catchup", 3), "2026-03-02T10:05:40Z", "", []decision{
			drops("2026-03-02T10:01:00Z"),
			drops("2026-03-02T10:02:00Z"),
			runs("2026-03-02T10:03:00Z", "2026-03-02T10:02:00Z", "2026-03-02T10:03:00Z"),
			runs("2026-03-02T10:04:00Z", "2026-03-02T10:03:00Z", "2026-03-02T10:04:00Z"),
			runs("2026-03-02T10:05:00Z", "2026-03-02T10:04:00Z", "2026-03-02T10:05:00Z"),
		}},
		{"minutely outage compress", minutely("compress", 0), "2026-03-02T10:05:40Z", "2026-03-02T10:00:00Z", []decision{
			drops("2026-03-02T10:01:00Z"),
			drops("2026-03-02T10:02:00Z"),
			drops("2026-03-02T10:03:00Z"),
			drops("2026-03-02T10:04:00Z"),
			runs("2026-03-02T10:05:00Z", "2026-03-02T10:00:00Z", "2026-03-02T10:05:00Z"),
		}},

		// Outage of 5 hourly intervals: fires 05:00..09:00 missed, 10:00 current,
		// all evaluated at 10:00:05 (after the current fire, before the next).
		{"hourly outage skip", hourly("skip", 0), "2026-03-02T10:00:05Z", "2026-03-02T04:00:00Z", []decision{
			drops("2026-03-02T05:00:00Z"),
			drops("2026-03-02T06:00:00Z"),
			drops("2026-03-02T07:00:00Z"),
			drops("2026-03-02T08:00:00Z"),
			drops("2026-03-02T09:00:00Z"),
			runs("2026-03-02T10:00:00Z", "2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z"),
		}},
		{"hourly outage catchup limit 3", hourly("catchup", 3), "2026-03-02T10:00:05Z", "2026-03-02T04:00:00Z", []decision{
			drops("2026-03-02T05:00:00Z"),
			drops("2026-03-02T06:00:00Z"),
			drops("2026-03-02T07:00:00Z"),
			runs("2026-03-02T08:00:00Z", "2026-03-02T07:00:00Z", "2026-03-02T08:00:00Z"),
			runs("2026-03-02T09:00:00Z", "2026-03-02T08:00:00Z", "2026-03-02T09:00:00Z"),
			runs("2026-03-02T10:00:00Z", "2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z"),
		}},
		{"hourly outage catchup limit 5", hourly("catchup", 5), "2026-03-02T10:00:05Z", "2026-03-02T04:00:00Z", []decision{
			drops("2026-03-02T05:00:00Z"),
			runs("2026-03-02T06:00:00Z", "2026-03-02T05:00:00Z", "2026-03-02T06:00:00Z"),
			runs("2026-03-02T07:00:00Z", "2026-03-02T06:00:00Z", "2026-03-02T07:00:00Z"),
			runs("2026-03-02T08:00:00Z", "2026-03-02T07:00:00Z", "2026-03-02T08:00:00Z"),
			runs("2026-03-02T09:00:00Z", "2026-03-02T08:00:00Z", "2026-03-02T09:00:00Z"),
			runs("2026-03-02T10:00:00Z", "2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z"),
		}},
		{"hourly outage catchup limit 10", hourly("catchup", 10), "2026-03-02T10:00:05Z", "2026-03-02T04:00:00Z", []decision{
			runs("2026-03-02T05:00:00Z", "2026-03-02T04:00:00Z", "2026-03-02T05:00:00Z"),
			runs("2026-03-02T06:00:00Z", "2026-03-02T05:00:00Z", "2026-03-02T06:00:00Z"),
			runs("2026-03-02T07:00:00Z", "2026-03-02T06:00:00Z", "2026-03-02T07:00:00Z"),
			runs("2026-03-02T08:00:00Z", "2026-03-02T07:00:00Z", "2026-03-02T08:00:00Z"),
			runs("2026-03-02T09:00:00Z", "2026-03-02T08:00:00Z", "2026-03-02T09:00:00Z"),
			runs("2026-03-02T10:00:00Z", "2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z"),
		}},
		{"hourly outage compress with last window", hourly("compress", 0), "2026-03-02T10:00:05Z", "2026-03-02T04:00:00Z", []decision{
			drops("2026-03-02T05:00:00Z"),
			drops("2026-03-02T06:00:00Z"),
			drops("2026-03-02T07:00:00Z"),
			drops("2026-03-02T08:00:00Z"),
			drops("2026-03-02T09:00:00Z"),
			runs("2026-03-02T10:00:00Z", "2026-03-02T04:00:00Z", "2026-03-02T10:00:00Z"),
		}},
		{"hourly outage compress without last window", hourly("compress", 0), "2026-03-02T10:00:05Z", "", []decision{
			drops("2026-03-02T09:00:00Z"),
			runs("2026-03-02T10:00:00Z", "2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z"),
		}},
		{"compress last window at the previous fire", hourly("compress", 0), "2026-03-02T10:00:05Z", "2026-03-02T09:00:00Z", []decision{
			runs("2026-03-02T10:00:00Z", "2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z"),
		}},
		{"compress last window after the previous fire", hourly("compress", 0), "2026-03-02T10:00:05Z", "2026-03-02T09:30:00Z", []decision{
			runs("2026-03-02T10:00:00Z", "2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z"),
		}},

		// Weekdays at 09:00 in Berlin: Friday 2026-03-27 09:00 CET is 08:00Z,
		// Monday 2026-03-30 09:00 CEST (after the DST change) is 07:00Z, so the
		// weekend interval is 71h and its grace 7h6m.
		{"weekdays Monday 7h late", weekdays("skip", 0), "2026-03-30T14:00:00Z", "",
			[]decision{runs("2026-03-30T07:00:00Z", "2026-03-27T08:00:00Z", "2026-03-30T07:00:00Z")}},
		{"weekdays Monday 7h7m late", weekdays("skip", 0), "2026-03-30T14:07:00Z", "",
			[]decision{drops("2026-03-30T07:00:00Z")}},
		{"weekdays Tuesday 2h30m late (grace 2h24m)", weekdays("skip", 0), "2026-03-31T09:30:00Z", "",
			[]decision{drops("2026-03-31T07:00:00Z")}},
		{"weekdays outage catchup limit 3", weekdays("catchup", 3), "2026-03-31T07:30:00Z", "", []decision{
			drops("2026-03-26T08:00:00Z"),
			runs("2026-03-27T08:00:00Z", "2026-03-26T08:00:00Z", "2026-03-27T08:00:00Z"),
			runs("2026-03-30T07:00:00Z", "2026-03-27T08:00:00Z", "2026-03-30T07:00:00Z"),
			runs("2026-03-31T07:00:00Z", "2026-03-30T07:00:00Z", "2026-03-31T07:00:00Z"),
		}},
		{"weekdays outage compress", weekdays("compress", 0), "2026-03-31T07:30:00Z", "2026-03-25T08:00:00Z", []decision{
			drops("2026-03-26T08:00:00Z"),
			drops("2026-03-27T08:00:00Z"),
			drops("2026-03-30T07:00:00Z"),
			runs("2026-03-31T07:00:00Z", "2026-03-25T08:00:00Z", "2026-03-31T07:00:00Z"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := at(t, tt.now)
			var lastWindowEnd *time.Time
			if tt.lastWindowEnd != "" {
				end := at(t, tt.lastWindowEnd)
				lastWindowEnd = &end
			}
			for _, want := range tt.want {
				plan, err := Plan(tt.trigger, at(t, want.fire), now, lastWindowEnd)
				require.NoError(t, err, want.fire)
				assert.Equal(t, want.run, plan.Run, "fire %s: %s", want.fire, plan.Reason)
				assert.True(t, strings.HasPrefix(plan.Reason, tt.trigger.MisfirePolicy+": "), "reason %q", plan.Reason)
				if want.run {
					assert.Equal(t, at(t, want.start), plan.WindowStart, "window start of fire %s", want.fire)
					assert.Equal(t, at(t, want.end), plan.WindowEnd, "window end of fire %s", want.fire)
				}
			}
		})
	}
}

func TestPlanReason(t *testing.T) {
	trigger := func(policy string, limit int) contracts.CronTrigger {
		return contracts.CronTrigger{Expression: "* * * * *", MisfirePolicy: policy, CatchupLimit: limit}
	}
	lastWindowEnd := at(t, "2026-03-02T10:00:00Z")
	tests := []struct {
		name    string
		trigger contracts.CronTrigger
		fire    string
		last    *time.Time
		want    string
	}{
		{"skip late", trigger("skip", 0), "2026-03-02T10:05:00Z", nil, "skip: fire is 40s late (grace 10s)"},
		{"skip overtaken", trigger("skip", 0), "2026-03-02T10:03:00Z", nil, "skip: fire is 2m40s late, the later fire at 2026-03-02T10:04:00Z is already due"},
		{"catchup over limit", trigger("catchup", 3), "2026-03-02T10:01:00Z", nil, "catchup: 3 or more later fires are due, limit 3: only the newest 3 run"},
		{"catchup replay", trigger("catchup", 3), "2026-03-02T10:03:00Z", nil, "catchup: replaying a missed fire, 2 later fires are due, limit 3"},
		{"compress overtaken", trigger("compress", 0), "2026-03-02T10:04:00Z", nil, "compress: the later fire at 2026-03-02T10:05:00Z is already due and covers this interval"},
		{"compress widened", trigger("compress", 0), "2026-03-02T10:05:00Z", &lastWindowEnd, "compress: window widened back to 2026-03-02T10:00:00Z to cover 5 intervals"},
	}
	now := at(t, "2026-03-02T10:05:40Z")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Plan(tt.trigger, at(t, tt.fire), now, tt.last)
			require.NoError(t, err)
			assert.Equal(t, tt.want, plan.Reason)
		})
	}
}

func TestPlanCompressLongOutage(t *testing.T) {
	c := contracts.CronTrigger{Expression: "* * * * *", MisfirePolicy: "compress"}
	last := at(t, "2025-03-02T10:00:00Z")
	plan, err := Plan(c, at(t, "2026-03-02T10:00:00Z"), at(t, "2026-03-02T10:00:01Z"), &last)
	require.NoError(t, err)
	assert.True(t, plan.Run)
	assert.Equal(t, last, plan.WindowStart)
	assert.Equal(t, "compress: window widened back to 2025-03-02T10:00:00Z to cover more than 1000 intervals", plan.Reason)
}

func TestPlanErrors(t *testing.T) {
	fire := at(t, "2026-03-02T10:00:00Z")
	tests := []struct {
		name    string
		trigger contracts.CronTrigger
		want    string
	}{
		{"empty expression", contracts.CronTrigger{MisfirePolicy: "skip"}, "cron expression is empty"},
		{"out of range", contracts.CronTrigger{Expression: "61 * * * *", MisfirePolicy: "skip"}, `cron expression "61 * * * *"`},
		{"three fields", contracts.CronTrigger{Expression: "* * *", MisfirePolicy: "skip"}, "want 5 fields"},
		{"six fields", contracts.CronTrigger{Expression: "0 * * * * *", MisfirePolicy: "skip"}, "want 5 fields"},
		{"unknown timezone", contracts.CronTrigger{Expression: "* * * * *", Timezone: "Mars/Olympus_Mons", MisfirePolicy: "skip"}, `cron timezone "Mars/Olympus_Mons"`},
		{"timezone in expression", contracts.CronTrigger{Expression: "CRON_TZ=UTC * * * * *", MisfirePolicy: "skip"}, "timezone field"},
		{"descriptor", contracts.CronTrigger{Expression: "@every 5m", MisfirePolicy: "skip"}, "descriptors are not supported"},
		{"question mark", contracts.CronTrigger{Expression: "0 9 ? * 1", MisfirePolicy: "skip"}, "use * instead of ?"},
		{"Sunday as 7", contracts.CronTrigger{Expression: "0 9 * * 7", MisfirePolicy: "skip"}, `cron expression "0 9 * * 7"`},
		{"never fires", contracts.CronTrigger{Expression: "0 0 30 2 *", MisfirePolicy: "skip"}, "no fire within 8 years"},
		{"unknown policy", contracts.CronTrigger{Expression: "* * * * *", MisfirePolicy: "sometimes"}, `misfire policy "sometimes"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Plan(tt.trigger, fire, fire, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
