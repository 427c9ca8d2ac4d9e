package api_test

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/idempotency/memory"
	"github.com/entityflow/entityflow/workflows"
)

// A burst of 60 concurrent commands to one customer, more than the default
// admission takes (8 in flight, 16 queued): none waits past its deadline,
// the overflow is answered 429 entity-busy at once (and counted), and the
// rejected commands retried with the same keys bring the entity to the exact
// total, each event once.
func TestBurstToOneCustomerIsAdmittedOr429(t *testing.T) {
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

	statuses := make([]int, burst)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 1; i <= burst; i++ {
		wg.Go(func() {
			<-start
			began := time.Now()
			r := s.do("POST", path, "burst-"+strconv.Itoa(i), body(i))
			if took := time.Since(began); took > timeout {
				t.Errorf("command %d took %s, past the %s deadline (%d %s)", i, took, timeout, r.status, r.body)
			}
			switch r.status {
			case http.StatusOK:
			case http.StatusTooManyRequests:
				if secs, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || secs < 1 {
					t.Errorf("command %d: 429 with Retry-After %q", i, r.header.Get("Retry-After"))
				}
			default:
				t.Errorf("command %d: %d %s", i, r.status, r.body)
			}
			statuses[i-1] = r.status
		})
	}
	close(start)
	wg.Wait()
	rejected := 0
	for _, st := range statuses {
		if st == http.StatusTooManyRequests {
			rejected++
		}
	}
	t.Logf("burst of %d: %d answered 429", burst, rejected)
	if rejected == 0 {
		t.Fatalf("no 429 in a burst of %d against 8 in flight + 16 queued", burst)
	}
	if got := counter(t, s, "rejected"); int(got) != rejected {
		t.Fatalf("entity_admission_total{outcome=rejected} = %v, want %d", got, rejected)
	}

	// Retry the rejected ones with their keys, as a client does.
	deadline := time.Now().Add(2 * time.Minute)
	for i := 1; i <= burst; i++ {
		for statuses[i-1] != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatalf("command %d still %d", i, statuses[i-1])
			}
			r := s.do("POST", path, "burst-"+strconv.Itoa(i), body(i))
			statuses[i-1] = r.status
			if r.status == http.StatusTooManyRequests || r.status == http.StatusConflict {
				time.Sleep(100 * time.Millisecond)
			} else if r.status != http.StatusOK {
				t.Fatalf("retry of command %d: %d %s", i, r.status, r.body)
			}
		}
	}
	st := decode[workflows.Status](t, s.do("GET", "/v1/customers/c-burst", "", nil))
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
