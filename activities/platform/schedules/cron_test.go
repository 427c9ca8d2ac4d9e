package schedules

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/contracts"
)

func TestNext(t *testing.T) {
	tests := []struct {
		name, expr, tz, after string
		want                  []string
	}{
		{"minutely", "* * * * *", "", "2026-03-02T10:00:00Z",
			[]string{"2026-03-02T10:01:00Z", "2026-03-02T10:02:00Z"}},
		{"day of month and day of week both match", "0 9 1 * 1", "", "2026-03-02T00:00:00Z",
			[]string{"2026-06-01T09:00:00Z", "2027-02-01T09:00:00Z"}},
		{"02:30 in Berlin is skipped on the spring DST change", "30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z"}},
		{"02:30 in Berlin fires once on the autumn DST change", "30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T01:30:00Z", "2026-10-26T01:30:00Z"}},
		// The server's quirks in the repeated hour, reproduced on purpose (and
		// checked against a server by TestBackfillOnServer): the second 02:00 is
		// skipped, and */30 at 02 fires at 02:00 CET and 03:30 CET.
		{"hourly through the repeated hour", "0 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"}},
		{"half-hourly in the repeated hour", "*/30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T01:00:00Z", "2026-10-25T02:30:00Z", "2026-10-26T01:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parse(contracts.CronTrigger{Expression: tt.expr, Timezone: tt.tz})
			require.NoError(t, err)
			var got []string
			for f := at(t, tt.after); len(got) < len(tt.want); {
				f = s.next(f)
				got = append(got, stamp(f))
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestPrevFindsRareFires(t *testing.T) {
	tests := []struct {
		expr, before, want string
	}{
		{"* * * * *", "2026-03-02T10:00:00Z", "2026-03-02T09:59:00Z"},
		{"* * * * *", "2026-03-02T10:00:30Z", "2026-03-02T10:00:00Z"},
		{"* 9 * * *", "2026-03-02T09:00:00Z", "2026-03-01T09:59:00Z"},
		{"0 0 1 1 *", "2026-01-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"0 0 29 2 *", "2028-02-29T00:00:00Z", "2024-02-29T00:00:00Z"},
		{"0 9 1 * 1", "2027-02-01T09:00:00Z", "2026-06-01T09:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.expr+" before "+tt.before, func(t *testing.T) {
			s, err := parse(contracts.CronTrigger{Expression: tt.expr})
			require.NoError(t, err)
			got, err := s.prev(at(t, tt.before))
			require.NoError(t, err)
			assert.Equal(t, at(t, tt.want), got)
		})
	}
}

func TestInterval(t *testing.T) {
	tests := []struct {
		name   string
		expr   string
		tz     string
		around string
		want   time.Duration
	}{
		{"minutely", "* * * * *", "", "2026-03-02T10:00:30Z", time.Minute},
		{"every 15 minutes", "*/15 * * * *", "", "2026-03-02T10:00:00Z", 15 * time.Minute},
		{"hourly", "0 * * * *", "UTC", "2026-03-02T10:00:00Z", time.Hour},
		{"weekdays over a plain weekend", "0 9 * * 1-5", "Europe/Berlin", "2026-03-09T00:00:00Z", 72 * time.Hour},
		{"weekdays over the spring DST weekend", "0 9 * * 1-5", "Europe/Berlin", "2026-03-26T10:00:00Z", 72 * time.Hour},
		{"weekdays over the autumn DST weekend", "0 9 * * 1-5", "Europe/Berlin", "2026-10-21T00:00:00Z", 73 * time.Hour},
		{"monthly", "0 0 1 * *", "", "2026-01-15T00:00:00Z", 31 * 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Interval(contracts.CronTrigger{Expression: tt.expr, Timezone: tt.tz}, at(t, tt.around))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestGrace(t *testing.T) {
	tests := []struct{ interval, want time.Duration }{
		{0, 10 * time.Second},
		{time.Minute, 10 * time.Second},
		{100 * time.Second, 10 * time.Second},
		{15 * time.Minute, 90 * time.Second},
		{time.Hour, 6 * time.Minute},
		{71 * time.Hour, 7*time.Hour + 6*time.Minute},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Grace(tt.interval), "Grace(%v)", tt.interval)
	}
}
