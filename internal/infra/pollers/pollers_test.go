package pollers

import (
	"testing"

	"go.temporal.io/sdk/worker"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{"", "auto", false},
		{"auto", "auto", false},
		{" AUTO ", "auto", false},
		{"2", "2", false},
		{"16", "16", false},
		{"1", "", true},
		{"0", "", true},
		{"-4", "", true},
		{"many", "", true},
		{"4.5", "", true},
	}
	for _, tt := range tests {
		s, err := Parse(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("Parse(%q) = %v, want an error", tt.in, s)
			}
			continue
		}
		if err != nil || s.String() != tt.want {
			t.Errorf("Parse(%q) = %v, %v; want %s", tt.in, s, err, tt.want)
		}
	}
}

// pollers describes what opts ask of each kind of poller: a count, a
// behaviour, or nothing.
func pollers(opts worker.Options) (workflowCount, activityCount int, workflowBehavior, activityBehavior bool) {
	return opts.MaxConcurrentWorkflowTaskPollers, opts.MaxConcurrentActivityTaskPollers,
		opts.WorkflowTaskPollerBehavior != nil, opts.ActivityTaskPollerBehavior != nil
}

// Apply replaces whatever the options said of the pollers, and keeps the rest.
func TestApply(t *testing.T) {
	sized := worker.Options{MaxConcurrentWorkflowTaskPollers: 3, MaxConcurrentActivityTaskPollers: 5, MaxConcurrentActivityExecutionSize: 7}
	scaled := Setting{}.Apply(worker.Options{MaxConcurrentActivityExecutionSize: 7})
	tests := []struct {
		name      string
		setting   string
		opts      worker.Options
		wfN, actN int
		wfB, actB bool
	}{
		{"auto over counts", "auto", sized, 0, 0, true, true},
		{"auto over nothing", "auto", worker.Options{MaxConcurrentActivityExecutionSize: 7}, 0, 0, true, true},
		{"fixed over counts", "8", sized, 8, 8, false, false},
		{"fixed over behaviours", "4", scaled, 4, 4, false, false},
	}
	for _, tt := range tests {
		s, err := Parse(tt.setting)
		if err != nil {
			t.Fatal(err)
		}
		got := s.Apply(tt.opts)
		wfN, actN, wfB, actB := pollers(got)
		if wfN != tt.wfN || actN != tt.actN || wfB != tt.wfB || actB != tt.actB || got.MaxConcurrentActivityExecutionSize != 7 {
			t.Errorf("%s: counts %d/%d, behaviours %v/%v, activity slots %d; want %d/%d, %v/%v, 7",
				tt.name, wfN, actN, wfB, actB, got.MaxConcurrentActivityExecutionSize, tt.wfN, tt.actN, tt.wfB, tt.actB)
		}
	}
}

// Default fills in autoscaling for each kind of poller left unset, and only
// for it.
func TestDefault(t *testing.T) {
	tests := []struct {
		name      string
		opts      worker.Options
		wfN, actN int
		wfB, actB bool
	}{
		{"nothing set", worker.Options{}, 0, 0, true, true},
		{"workflow count set", worker.Options{MaxConcurrentWorkflowTaskPollers: 8}, 8, 0, false, true},
		{"activity count set", worker.Options{MaxConcurrentActivityTaskPollers: 4}, 0, 4, true, false},
		{"both counts set", worker.Options{MaxConcurrentWorkflowTaskPollers: 2, MaxConcurrentActivityTaskPollers: 2}, 2, 2, false, false},
	}
	for _, tt := range tests {
		wfN, actN, wfB, actB := pollers(Default(tt.opts))
		if wfN != tt.wfN || actN != tt.actN || wfB != tt.wfB || actB != tt.actB {
			t.Errorf("%s: counts %d/%d, behaviours %v/%v; want %d/%d, %v/%v", tt.name, wfN, actN, wfB, actB, tt.wfN, tt.actN, tt.wfB, tt.actB)
		}
	}
	set := Setting{}.Apply(worker.Options{})
	if got := Default(set); got.WorkflowTaskPollerBehavior != set.WorkflowTaskPollerBehavior || got.ActivityTaskPollerBehavior != set.ActivityTaskPollerBehavior {
		t.Error("Default replaced behaviours the options had")
	}
}
