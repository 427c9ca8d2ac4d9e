package api_test

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// A burst of 60 concurrent commands to one customer, more than the default
// admission runs at once (8 in flight): the commands behind the slots are
// coalesced into apply-points-batch updates, so every one is answered 200
// with its own event's result (none refused 429, none past its deadline),
// and the entity ends at the exact total, each event once.
func TestBurstToOneCustomerIsAnsweredInFull(t *testing.T) {
	const (
		burst   = 60
		points  = 5
		timeout = 10 * time.Second
	)
	s := newStackWith(t, memory.NewStore(0), stackConfig{timeout: timeout})
	path := "/v1/customers/c-burst/points"
	body := func(i int) map[string]any {
		return map[string]any{"activity": "purchase", "points": points, "source_id": fmt.Sprintf("order-%d", i)}
	}
	// Create the entity first, so the burst measures admission, not starts.
	if r := s.do("POST", path, "burst-0", body(0)); r.status != http.StatusOK {
		t.Fatalf("first command: %d %s", r.status, r.body)
	}

	results := make([]rewards.PointsResult, burst)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 1; i <= burst; i++ {
		wg.Go(func() {
			<-start
			r := s.do("POST", path, "burst-"+strconv.Itoa(i), body(i))
			if r.status != http.StatusOK {
				t.Errorf("command %d: %d %s", i, r.status, r.body)
				return
			}
			results[i-1] = decode[rewards.PointsResult](t, r)
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Each answer is its own event's: applied once, at a balance no other
	// event of the burst was answered with.
	seen := map[int64]int{}
	for i, res := range results {
		if !res.Applied || res.Duplicate {
			t.Fatalf("command %d: %+v, want applied", i+1, res)
		}
		if j, ok := seen[res.Points]; ok {
			t.Fatalf("commands %d and %d both answered %d points", j+1, i+1, res.Points)
		}
		seen[res.Points] = i
	}
	if got := counter(t, s, "rejected"); got != 0 {
		t.Fatalf("entity_admission_total{outcome=rejected} = %v, want 0", got)
	}
	st := decode[rewards.Status](t, s.do("GET", "/v1/customers/c-burst", "", nil))
	if st.Points != (burst+1)*points || st.EventCount != burst+1 {
		t.Fatalf("status %+v, want %d points from %d events", st, (burst+1)*points, burst+1)
	}
}

// counter is the API's entity_admission_total{outcome}.
func counter(t *testing.T, s *stack, outcome string) float64 {
	t.Helper()
	families, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "entity_admission_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
