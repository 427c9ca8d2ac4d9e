// Package pollers holds the workers' task poller setting: the SDK's poller
// autoscaling (the default) or a fixed number of pollers per task queue, for
// workflow and activity tasks alike. The SDK's own default of two pollers a
// queue held back anything that starts workflows: a new entity's first
// workflow task queued behind them (DESIGN.md, "Known ground").
package pollers

import (
	"fmt"
	"strconv"
	"strings"

	"go.temporal.io/sdk/worker"
)

// Auto is the Setting text of poller autoscaling.
const Auto = "auto"

// Setting is how many task pollers a worker runs per task queue. The zero
// value is autoscaling.
type Setting struct {
	fixed int // 0: autoscaling
}

// Parse reads a setting: "auto" (or empty) for the SDK's poller autoscaling,
// or a whole number of at least 2 for that many pollers of each kind (the
// SDK refuses one workflow task poller: it would poll the sticky queue only).
func Parse(s string) (Setting, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, Auto) {
		return Setting{}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 2 {
		return Setting{}, fmt.Errorf("pollers %q: want %s or a whole number of at least 2", s, Auto)
	}
	return Setting{fixed: n}, nil
}

// String is the setting as Parse reads it.
func (s Setting) String() string {
	if s.fixed == 0 {
		return Auto
	}
	return strconv.Itoa(s.fixed)
}

// Apply returns opts with the workflow and activity task pollers set as s
// says; whatever opts said of them before is replaced.
func (s Setting) Apply(opts worker.Options) worker.Options {
	if s.fixed > 0 {
		opts.WorkflowTaskPollerBehavior, opts.ActivityTaskPollerBehavior = nil, nil
		opts.MaxConcurrentWorkflowTaskPollers, opts.MaxConcurrentActivityTaskPollers = s.fixed, s.fixed
		return opts
	}
	opts.MaxConcurrentWorkflowTaskPollers, opts.MaxConcurrentActivityTaskPollers = 0, 0
	opts.WorkflowTaskPollerBehavior = worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{})
	opts.ActivityTaskPollerBehavior = worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{})
	return opts
}

// Default returns opts with autoscaling for each kind of poller opts leaves
// unset (neither a count nor a behaviour); a kind it sets stays as it is.
func Default(opts worker.Options) worker.Options {
	if opts.MaxConcurrentWorkflowTaskPollers == 0 && opts.WorkflowTaskPollerBehavior == nil {
		opts.WorkflowTaskPollerBehavior = worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{})
	}
	if opts.MaxConcurrentActivityTaskPollers == 0 && opts.ActivityTaskPollerBehavior == nil {
		opts.ActivityTaskPollerBehavior = worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{})
	}
	return opts
}
