package sdkmetrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/entityflow/entityflow/internal/infra/sdkmetrics"
)

func TestHandlerExportsSDKMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := sdkmetrics.NewHandler(reg).WithTags(map[string]string{"namespace": "default"})
	polls := h.WithTags(map[string]string{"task_queue": "rewards", "poller_type": "workflow_task"})
	polls.Counter("temporal_request").Inc(2)
	polls.Counter("temporal_request").Inc(1)
	// Another tag set under the same name, and a tag the exporter does not know.
	h.WithTags(map[string]string{"operation": "PollWorkflowTaskQueue", "unknown_tag": "x"}).Counter("temporal_request").Inc(5)
	h.Gauge("temporal_sticky_cache_size").Update(42)
	h.Timer("temporal_workflow_task_execution_latency").Record(30 * time.Millisecond)
	// A name reused for another kind of metric keeps both.
	h.Gauge("temporal_request").Update(7)

	want := `
# HELP temporal_request Temporal SDK counter temporal_request.
# TYPE temporal_request counter
temporal_request{activity_type="",cause="",client_name="",failure_reason="",namespace="default",nexus_operation="",nexus_service="",operation="",poller_type="workflow_task",status_code="",task_queue="rewards",worker_type="",workflow_type=""} 3
temporal_request{activity_type="",cause="",client_name="",failure_reason="",namespace="default",nexus_operation="",nexus_service="",operation="PollWorkflowTaskQueue",poller_type="",status_code="",task_queue="",worker_type="",workflow_type=""} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "temporal_request"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{
		"temporal_sticky_cache_size":               1,
		"temporal_workflow_task_execution_latency": 1,
		"temporal_request_gauge":                   1,
	} {
		if got, err := testutil.GatherAndCount(reg, name); err != nil || got != want {
			t.Errorf("%s: %d series (%v), want %d", name, got, err, want)
		}
	}
}

// The sticky cache is one per process, shared by every worker, and the SDK
// reports its size under each workflow type's tags: it is exported once,
// without labels, so that sum() does not multiply it.
func TestStickyCacheSizeIsExportedOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := sdkmetrics.NewHandler(reg).WithTags(map[string]string{"namespace": "default"})
	for _, tags := range []map[string]string{
		{"task_queue": "rewards", "workflow_type": "RewardsWorkflow"},
		{"task_queue": "activities", "workflow_type": "RunActivityWorkflow"},
		{"task_queue": "activities", "workflow_type": "TaskInstanceWorkflow"},
	} {
		h.WithTags(tags).Gauge("temporal_sticky_cache_size").Update(3)
	}
	want := `
# HELP temporal_sticky_cache_size Temporal SDK gauge temporal_sticky_cache_size.
# TYPE temporal_sticky_cache_size gauge
temporal_sticky_cache_size 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "temporal_sticky_cache_size"); err != nil {
		t.Fatal(err)
	}
}
