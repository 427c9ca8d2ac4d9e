package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/workflows/platform"
)

func manualRun(i int) Run {
	id := fmt.Sprint("manual-", i)
	return Run{RunRecord: platform.RunRecord{RunID: id, WorkflowID: "wf-" + id, ActivityID: "act", TenantID: "t", TriggerType: "manual"}}
}

// 20 concurrent requests for a limit of 3: exactly 3 are admitted, on both
// databases; a repeated request finds its row; finishing or abandoning a run
// frees its slot.
func TestAdmitRun(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		var mu sync.Mutex
		var admitted []int
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				a, err := s.AdmitRun(ctx, manualRun(i), 3)
				if !assert.NoError(t, err) {
					return
				}
				if a.Admitted {
					mu.Lock()
					admitted = append(admitted, i)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Len(t, admitted, 3, "admitted %v", admitted)
		inFlight, err := s.RunningRuns(ctx, "act")
		require.NoError(t, err)
		assert.Equal(t, 3, inFlight)

		again, err := s.AdmitRun(ctx, manualRun(admitted[0]), 3)
		require.NoError(t, err)
		assert.Equal(t, Admission{Existed: true, Status: platform.StatusPending}, again, "a repeated request finds its row")
		assert.False(t, again.Ended())

		full, err := s.AdmitRun(ctx, manualRun(100), 3)
		require.NoError(t, err)
		assert.Equal(t, Admission{InFlight: 3}, full)

		_, err = s.FinishRun(ctx, manualRun(admitted[0]).RunID, platform.StatusSucceeded, "", time.Now())
		require.NoError(t, err)
		ended, err := s.AdmitRun(ctx, manualRun(admitted[0]), 3)
		require.NoError(t, err)
		assert.Equal(t, Admission{Existed: true, Status: platform.StatusSucceeded}, ended, "a repeated request of a finished run finds it final")
		assert.True(t, ended.Ended())
		abandoned, err := s.AbandonRun(ctx, manualRun(admitted[1]).RunID)
		require.NoError(t, err)
		assert.True(t, abandoned)
		for _, i := range []int{100, 101} {
			a, err := s.AdmitRun(ctx, manualRun(i), 3)
			require.NoError(t, err)
			assert.True(t, a.Admitted, "run %d after two slots were freed", i)
		}
		a, err := s.AdmitRun(ctx, manualRun(102), 3)
		require.NoError(t, err)
		assert.False(t, a.Admitted)

		a, err = s.AdmitRun(ctx, manualRun(103), 0)
		require.NoError(t, err)
		assert.True(t, a.Admitted, "no limit")
	})
}
