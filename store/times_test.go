package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/workflows/platform"
)

// TestTimeRoundTrip stores times through every time column and checks that
// each database returns them in UTC truncated to microseconds, and that both
// databases return identical values.
func TestTimeRoundTrip(t *testing.T) {
	times := []struct {
		name string
		in   time.Time
	}{
		{"nanoseconds truncated", time.Date(2024, 2, 29, 23, 59, 59, 999999999, time.UTC)},
		{"microsecond", time.Date(2024, 1, 1, 0, 0, 0, 1000, time.UTC)},
		{"whole second", time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)},
		{"other zone", time.Date(2025, 3, 30, 1, 30, 0, 123456000, time.FixedZone("IST", 5*3600+1800))},
		{"local with monotonic clock", time.Now()},
		{"epoch", time.Unix(0, 0)},
		{"far future", time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)},
	}
	read := map[string][]time.Time{}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := openStore(t, b.url(t))
			ctx := context.Background()
			for i, tt := range times {
				id := fmt.Sprint("r", i)
				in := tt.in
				_, err := s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: id, WorkflowID: id, ActivityID: "act", ScheduledFor: &in, WindowStart: &in, WindowEnd: &in}, CreatedAt: in})
				require.NoError(t, err)
				_, err = s.StartRun(ctx, id, in)
				require.NoError(t, err)
				_, err = s.FinishRun(ctx, id, platform.StatusSucceeded, "", in)
				require.NoError(t, err)

				r, _, err := s.GetRun(ctx, id)
				require.NoError(t, err)
				want := in.UTC().Truncate(time.Microsecond)
				for col, got := range map[string]time.Time{
					"scheduled_for": *r.ScheduledFor, "window_start": *r.WindowStart, "window_end": *r.WindowEnd,
					"created_at": r.CreatedAt, "started_at": *r.StartedAt, "finished_at": *r.FinishedAt,
				} {
					assert.Equal(t, want, got, "%s: %s", tt.name, col)
					assert.Equal(t, time.UTC, got.Location(), "%s: %s", tt.name, col)
				}
				read[b.name] = append(read[b.name], r.CreatedAt)
			}
		})
	}
	if len(read) == len(backends) {
		assert.Equal(t, read[DialectSQLite], read[DialectPostgres], "both databases return the same times")
	}
}
