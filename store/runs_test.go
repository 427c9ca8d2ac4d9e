package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/workflows/platform"
)

// entity abstracts runs and tasks for the tests of their shared lifecycle.
type entity struct {
	name string
	// log logs row id in the given status; a task gets a run logged first.
	log    func(s *Store, ctx context.Context, id string, status platform.RunStatus) (bool, error)
	start  func(s *Store, ctx context.Context, id string, at time.Time) (bool, error)
	finish func(s *Store, ctx context.Context, id string, status platform.RunStatus, errMsg string, at time.Time) (bool, error)
	get    func(s *Store, ctx context.Context, id string) (state, error)
}

// state is the lifecycle part of a run or task row.
type state struct {
	status            platform.RunStatus
	errMsg            string
	started, finished *time.Time
}

var entities = []entity{
	{
		name: "run",
		log: func(s *Store, ctx context.Context, id string, status platform.RunStatus) (bool, error) {
			return s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: id, WorkflowID: "wf-" + id, ActivityID: "act"}, Status: status, CreatedAt: at(0)})
		},
		start:  (*Store).StartRun,
		finish: (*Store).FinishRun,
		get: func(s *Store, ctx context.Context, id string) (state, error) {
			r, _, err := s.GetRun(ctx, id)
			return state{status: r.Status, errMsg: r.Error, started: r.StartedAt, finished: r.FinishedAt}, err
		},
	},
	{
		name: "task",
		log: func(s *Store, ctx context.Context, id string, status platform.RunStatus) (bool, error) {
			if _, err := s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: "run-" + id, WorkflowID: "wf-run-" + id, ActivityID: "act"}, CreatedAt: at(0)}); err != nil {
				return false, err
			}
			return s.LogTask(ctx, Task{ID: id, RunID: "run-" + id, TaskType: "send", Status: status, CreatedAt: at(0)})
		},
		start:  (*Store).StartTask,
		finish: (*Store).FinishTask,
		get: func(s *Store, ctx context.Context, id string) (state, error) {
			_, tasks, err := s.GetRun(ctx, "run-"+id)
			if err != nil || len(tasks) != 1 {
				return state{}, fmt.Errorf("run-%s has tasks %v: %w", id, tasks, err)
			}
			t := tasks[0]
			return state{status: t.Status, errMsg: t.Error, started: t.StartedAt, finished: t.FinishedAt}, nil
		},
	},
}

func TestLogOnce(t *testing.T) {
	const callers = 20
	for _, e := range entities {
		t.Run(e.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, s *Store) {
				ctx := context.Background()
				var created atomic.Int32
				parallel(callers, func(int) {
					ok, err := e.log(s, ctx, "once", platform.StatusPending)
					assert.NoError(t, err)
					if ok {
						created.Add(1)
					}
				})
				assert.Equal(t, int32(1), created.Load(), "calls that created the row")
				runs, err := s.ListRuns(ctx, "act")
				require.NoError(t, err)
				assert.Len(t, runs, 1)
				n, err := s.CountTasks(ctx, "run-once")
				require.NoError(t, err)
				assert.Equal(t, map[string]int{"run": 0, "task": 1}[e.name], n)
			})
		})
	}
}

func TestTransitions(t *testing.T) {
	statuses := []platform.RunStatus{platform.StatusPending, platform.StatusRunning, platform.StatusSucceeded, platform.StatusFailed}
	allowed := map[[2]platform.RunStatus]bool{
		{platform.StatusPending, platform.StatusRunning}:   true,
		{platform.StatusPending, platform.StatusSucceeded}: true,
		{platform.StatusPending, platform.StatusFailed}:    true,
		{platform.StatusRunning, platform.StatusSucceeded}: true,
		{platform.StatusRunning, platform.StatusFailed}:    true,
	}
	when := at(time.Hour)
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		for _, e := range entities {
			for _, from := range statuses {
				for _, to := range statuses {
					t.Run(fmt.Sprintf("%s/%s->%s", e.name, from, to), func(t *testing.T) {
						id := fmt.Sprintf("%s-%s-%s", e.name, from, to)
						created, err := e.log(s, ctx, id, from)
						require.NoError(t, err)
						require.True(t, created)

						var changed bool
						switch to {
						case platform.StatusPending:
							changed, err = e.log(s, ctx, id, platform.StatusPending)
						case platform.StatusRunning:
							changed, err = e.start(s, ctx, id, when)
						default:
							changed, err = e.finish(s, ctx, id, to, "boom", when)
						}
						require.NoError(t, err)
						want := allowed[[2]platform.RunStatus{from, to}]
						assert.Equal(t, want, changed)

						got, err := e.get(s, ctx, id)
						require.NoError(t, err)
						if !want {
							assert.Equal(t, state{status: from}, got)
							return
						}
						assert.Equal(t, to, got.status)
						if to == platform.StatusRunning {
							assert.Equal(t, &when, got.started)
							assert.Nil(t, got.finished)
							return
						}
						assert.Equal(t, &when, got.finished)
						assert.Equal(t, "boom", got.errMsg)
					})
				}
			}
		}
	})
}

func TestTransitionErrors(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		for _, e := range entities {
			t.Run(e.name, func(t *testing.T) {
				_, err := e.start(s, ctx, "missing", at(0))
				assert.ErrorIs(t, err, ErrNotFound)
				_, err = e.finish(s, ctx, "missing", platform.StatusFailed, "", at(0))
				assert.ErrorIs(t, err, ErrNotFound)

				_, err = e.log(s, ctx, "x", platform.StatusPending)
				require.NoError(t, err)
				for _, status := range []platform.RunStatus{platform.StatusPending, platform.StatusRunning, "done", ""} {
					_, err = e.finish(s, ctx, "x", status, "", at(0))
					assert.ErrorContains(t, err, "is not \"succeeded\" or \"failed\"", "finish as %q", status)
				}
				_, err = e.log(s, ctx, "y", "done")
				assert.ErrorContains(t, err, `invalid status "done"`)
			})
		}
	})
}

// TestRace races every operation on one row and checks, while they run and
// after, that the status never moves backwards, a terminal status never
// changes, and the row records exactly the winning start and finish.
func TestRace(t *testing.T) {
	const callers, rounds = 20, 5
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		for _, e := range entities {
			t.Run(e.name, func(t *testing.T) {
				for round := range rounds {
					id := fmt.Sprintf("race-%d", round)
					_, err := e.log(s, ctx, id, platform.StatusPending)
					require.NoError(t, err)

					stop := make(chan struct{})
					observed := make(chan []platform.RunStatus)
					go func() { observed <- observe(ctx, t, s, e, id, stop) }()

					var mu sync.Mutex
					var starts, finishes []int
					parallel(callers, func(i int) {
						var changed bool
						var err error
						switch i % 4 {
						case 0:
							changed, err = e.log(s, ctx, id, platform.StatusPending)
						case 1:
							changed, err = e.start(s, ctx, id, at(time.Duration(i)*time.Second))
						case 2:
							changed, err = e.finish(s, ctx, id, platform.StatusSucceeded, "", at(time.Duration(i)*time.Second))
						case 3:
							changed, err = e.finish(s, ctx, id, platform.StatusFailed, fmt.Sprint("error ", i), at(time.Duration(i)*time.Second))
						}
						assert.NoError(t, err)
						if !changed {
							return
						}
						mu.Lock()
						defer mu.Unlock()
						if i%4 == 1 {
							starts = append(starts, i)
						} else {
							finishes = append(finishes, i)
						}
					})
					close(stop)
					seen := <-observed

					assert.LessOrEqual(t, len(starts), 1, "starts that changed the row")
					require.Len(t, finishes, 1, "finishes that changed the row")
					got, err := e.get(s, ctx, id)
					require.NoError(t, err)
					winner := finishes[0]
					assert.Equal(t, ptr(at(time.Duration(winner)*time.Second)), got.finished)
					if winner%4 == 2 {
						assert.Equal(t, state{status: platform.StatusSucceeded}, state{status: got.status, errMsg: got.errMsg})
					} else {
						assert.Equal(t, state{status: platform.StatusFailed, errMsg: fmt.Sprint("error ", winner)}, state{status: got.status, errMsg: got.errMsg})
					}
					if len(starts) == 1 {
						assert.Equal(t, ptr(at(time.Duration(starts[0])*time.Second)), got.started)
					} else {
						assert.Nil(t, got.started)
					}
					assert.Equal(t, got.status, seen[len(seen)-1], "last observed status")
				}
			})
		}
	})
}

// observe polls row id until stop closes and once more after, failing the
// test if its status moves backwards or leaves a terminal status. It returns
// the statuses seen.
func observe(ctx context.Context, t *testing.T, s *Store, e entity, id string, stop <-chan struct{}) []platform.RunStatus {
	rank := map[platform.RunStatus]int{platform.StatusPending: 0, platform.StatusRunning: 1, platform.StatusSucceeded: 2, platform.StatusFailed: 2}
	var seen []platform.RunStatus
	for done := false; !done; {
		select {
		case <-stop:
			done = true
		default:
		}
		got, err := e.get(s, ctx, id)
		if !assert.NoError(t, err) {
			return seen
		}
		if n := len(seen); n > 0 {
			prev := seen[n-1]
			assert.GreaterOrEqual(t, rank[got.status], rank[prev], "%s went from %s to %s", id, prev, got.status)
			if rank[prev] == 2 {
				assert.Equal(t, prev, got.status, "%s left terminal status %s", id, prev)
			}
		}
		seen = append(seen, got.status)
	}
	return seen
}

// parallel calls fn(0) ... fn(n-1) in n goroutines released together, and
// waits for them.
func parallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-release
			fn(i)
		})
	}
	close(release)
	wg.Wait()
}

func TestLogConflicts(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		_, err := s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: "r1", WorkflowID: "wf", ActivityID: "act"}})
		require.NoError(t, err)
		_, err = s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: "r2", WorkflowID: "wf", ActivityID: "act"}})
		assert.ErrorIs(t, err, ErrConflict, "workflow ID taken by another run")
		_, err = s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: "r1", WorkflowID: "other", ActivityID: "act"}})
		assert.ErrorIs(t, err, ErrConflict, "run ID logged with another workflow")
		_, err = s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: "r3", ActivityID: "act"}})
		assert.ErrorContains(t, err, "required")

		_, err = s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: "r2", WorkflowID: "wf2", ActivityID: "act"}})
		require.NoError(t, err)
		_, err = s.LogTask(ctx, Task{ID: "t1", RunID: "r1", TaskType: "send"})
		require.NoError(t, err)
		_, err = s.LogTask(ctx, Task{ID: "t1", RunID: "r2", TaskType: "send"})
		assert.ErrorIs(t, err, ErrConflict, "task ID taken by another run")

		_, err = s.LogTask(ctx, Task{ID: "t2", RunID: "no-such-run", TaskType: "send"})
		require.Error(t, err, "task of a run never logged")
		assert.False(t, IsUnavailable(err), "a foreign key violation is not transient: %v", err)
	})
}

func TestGetRun(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		run := Run{RunRecord: platform.RunRecord{RunID: "r1", WorkflowID: "wf-1", ActivityID: "act", TenantID: "acme", TriggerType: "schedule", ScheduledFor: ptr(at(0)), EventID: "ev-1", WindowStart: ptr(at(-time.Hour)), WindowEnd: ptr(at(0))}, Status: platform.StatusPending, CreatedAt: at(time.Second)}
		_, err := s.LogRun(ctx, run)
		require.NoError(t, err)
		// Logged out of order; index 10 must sort after 2.
		for _, k := range []struct {
			typ string
			idx int
		}{{"b", 10}, {"a", 2}, {"b", 2}, {"a", 10}, {"a", 1}} {
			_, err := s.LogTask(ctx, Task{ID: fmt.Sprintf("r1/%s/%d", k.typ, k.idx), RunID: "r1", TaskType: k.typ, Index: k.idx, CreatedAt: at(0)})
			require.NoError(t, err)
		}

		got, tasks, err := s.GetRun(ctx, "r1")
		require.NoError(t, err)
		assert.Equal(t, run, got)
		var order []string
		for _, task := range tasks {
			order = append(order, task.ID)
			assert.Equal(t, Task{ID: task.ID, RunID: "r1", TaskType: task.TaskType, Index: task.Index, Status: platform.StatusPending, CreatedAt: at(0)}, task)
		}
		assert.Equal(t, []string{"r1/a/1", "r1/a/2", "r1/a/10", "r1/b/2", "r1/b/10"}, order)

		byWorkflow, tasks2, err := s.GetRunByWorkflowID(ctx, "wf-1")
		require.NoError(t, err)
		assert.Equal(t, got, byWorkflow)
		assert.Equal(t, tasks, tasks2)
		n, err := s.CountTasks(ctx, "r1")
		require.NoError(t, err)
		assert.Equal(t, 5, n)

		_, _, err = s.GetRun(ctx, "missing")
		assert.ErrorIs(t, err, ErrNotFound)
		_, _, err = s.GetRunByWorkflowID(ctx, "missing")
		assert.ErrorIs(t, err, ErrNotFound)
	})
}

func TestListRuns(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		// Sub-second differences and a whole second next to a half one
		// check that SQLite's text order is time order.
		runs := []struct {
			id        string
			scheduled *time.Time
			created   time.Time
		}{
			{"none", nil, at(0)},
			{"late", ptr(at(2 * time.Second)), at(0)},
			{"half", ptr(at(0).Truncate(time.Second).Add(1500 * time.Millisecond)), at(0)},
			{"whole-2", ptr(at(0).Truncate(time.Second)), at(time.Second)},
			{"whole-1", ptr(at(0).Truncate(time.Second)), at(0)},
			{"micro", ptr(at(0).Truncate(time.Second).Add(time.Microsecond)), at(0)},
		}
		for _, r := range runs {
			_, err := s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: r.id, WorkflowID: "wf-" + r.id, ActivityID: "act", ScheduledFor: r.scheduled}, CreatedAt: r.created})
			require.NoError(t, err)
		}
		_, err := s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: "other", WorkflowID: "wf-other", ActivityID: "other"}})
		require.NoError(t, err)

		got, err := s.ListRuns(ctx, "act")
		require.NoError(t, err)
		var order []string
		for _, r := range got {
			order = append(order, r.RunID)
		}
		assert.Equal(t, []string{"whole-1", "whole-2", "micro", "half", "late", "none"}, order)

		empty, err := s.ListRuns(ctx, "nothing")
		require.NoError(t, err)
		assert.NotNil(t, empty)
		assert.Empty(t, empty)
	})
}

func TestRunningRuns(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		for i, r := range []struct {
			activity string
			status   platform.RunStatus
		}{
			{"act", platform.StatusPending}, {"act", platform.StatusRunning}, {"act", platform.StatusSucceeded}, {"act", platform.StatusFailed},
			{"act", platform.StatusRunning}, {"other", platform.StatusPending},
		} {
			id := fmt.Sprint("r", i)
			_, err := s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: id, WorkflowID: "wf-" + id, ActivityID: r.activity}, Status: r.status})
			require.NoError(t, err)
		}
		tests := []struct {
			activity string
			want     int
		}{{"act", 3}, {"other", 1}, {"none", 0}}
		for _, tt := range tests {
			n, err := s.RunningRuns(ctx, tt.activity)
			require.NoError(t, err)
			assert.Equal(t, tt.want, n, tt.activity)
		}
	})
}

func TestLastWindowEnd(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		for i, r := range []struct {
			activity string
			end      *time.Time
		}{
			{"act", ptr(at(time.Hour))}, {"act", ptr(at(3 * time.Hour))}, {"act", ptr(at(2 * time.Hour))},
			{"act", nil}, {"other", ptr(at(150 * time.Minute))},
		} {
			id := fmt.Sprint("r", i)
			_, err := s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: id, WorkflowID: "wf-" + id, ActivityID: r.activity, WindowEnd: r.end}, Status: platform.StatusFailed})
			require.NoError(t, err)
		}
		tests := []struct {
			name     string
			activity string
			before   time.Time
			want     time.Time
			ok       bool
		}{
			{"between", "act", at(150 * time.Minute), at(2 * time.Hour), true},
			{"equal is included", "act", at(2 * time.Hour), at(2 * time.Hour), true},
			{"a microsecond before", "act", at(2*time.Hour - time.Microsecond), at(time.Hour), true},
			{"after all", "act", at(24 * time.Hour), at(3 * time.Hour), true},
			{"before all", "act", at(0), time.Time{}, false},
			{"other activity", "other", at(24 * time.Hour), at(150 * time.Minute), true},
			{"unknown activity", "none", at(24 * time.Hour), time.Time{}, false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				end, ok, err := s.LastWindowEnd(ctx, tt.activity, tt.before)
				require.NoError(t, err)
				assert.Equal(t, tt.ok, ok)
				assert.Equal(t, tt.want, end)
			})
		}
	})
}
