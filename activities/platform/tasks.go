package platform

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	platformwf "github.com/entityflow/entityflow/workflows/platform"
)

// TaskHandler performs one attempt of a task instance. Returning an error
// makes the attempt fail; TaskInstanceWorkflow retries it with backoff (an
// application error marked non-retryable fails the task at once). Handlers
// must honour ctx and heartbeat when they run for more than a few seconds.
type TaskHandler func(ctx context.Context, in platformwf.TaskInput) error

// TaskHandlers maps task types to their handlers; the worker registers the
// task types it can run here.
type TaskHandlers map[string]TaskHandler

// maxSleep bounds the sleep task so that it stays within one handler attempt.
const maxSleep = 5 * time.Minute

// DefaultTaskHandlers returns the task types every worker ships: noop, sleep
// and fail, enough for tests and demos to exercise runs, durations and retries.
func DefaultTaskHandlers() TaskHandlers {
	return TaskHandlers{"noop": noopTask, "sleep": sleepTask, "fail": failTask}
}

// noopTask succeeds at once.
func noopTask(context.Context, platformwf.TaskInput) error { return nil }

// sleepParams are the params of the sleep task.
type sleepParams struct {
	// Duration is how long the task takes, a Go duration ("2s"); default 1s.
	Duration string `json:"duration"`
}

// sleepTask waits for params.duration, heartbeating every second, and stops
// early when the attempt is cancelled.
func sleepTask(ctx context.Context, in platformwf.TaskInput) error {
	var p sleepParams
	if err := decodeParams(in.Params, &p); err != nil {
		return err
	}
	d := time.Second
	if p.Duration != "" {
		var err error
		if d, err = time.ParseDuration(p.Duration); err != nil || d < 0 || d > maxSleep {
			return invalidParams("sleep: params.duration must be a Go duration between 0s and %v, got %q", maxSleep, p.Duration)
		}
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			return nil
		case <-tick.C:
			activity.RecordHeartbeat(ctx)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// failParams are the params of the fail task.
type failParams struct {
	// Times is how many attempts fail before one succeeds; default 1.
	Times *int `json:"times"`
}

// failTask fails its first params.times attempts and then succeeds, so tests
// and demos can watch retries (and, with times at or above the attempt limit,
// a failed task and run).
func failTask(ctx context.Context, in platformwf.TaskInput) error {
	var p failParams
	if err := decodeParams(in.Params, &p); err != nil {
		return err
	}
	times := 1
	if p.Times != nil {
		times = *p.Times
	}
	if times < 0 {
		return invalidParams("fail: params.times must not be negative, got %d", times)
	}
	if attempt := int(activity.GetInfo(ctx).Attempt); attempt <= times {
		return fmt.Errorf("fail: attempt %d of %d planned failures", attempt, times)
	}
	return nil
}

// decodeParams reads a task's params into p; absent params leave p as is.
func decodeParams(raw json.RawMessage, p any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, p); err != nil {
		return invalidParams("task params: %v", err)
	}
	return nil
}

// invalidParams is a non-retryable error: params that are wrong now will be
// wrong on every attempt.
func invalidParams(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), platformwf.ErrInvalidRunInput, nil)
}
