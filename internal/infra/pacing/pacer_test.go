package pacing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
)

// The Pacer runs every call, never more than Concurrency at once, and
// counts the calls and the overloaded ones; its stats hold the rates it set.
func TestPacerRunsEveryCallWithinItsConcurrency(t *testing.T) {
	p, err := Start(Config{Max: 1000, Start: 1000, Concurrency: 3, Interval: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var inFlight, most, ran atomic.Int64
	var mu sync.Mutex
	for i := range 40 {
		err := p.Go(context.Background(), func(context.Context) error {
			n := inFlight.Add(1)
			mu.Lock()
			most.Store(max(most.Load(), n))
			mu.Unlock()
			time.Sleep(time.Millisecond)
			inFlight.Add(-1)
			ran.Add(1)
			if i%10 == 0 {
				return fmt.Errorf("call %d: %w", i, serviceerror.NewResourceExhausted(0, "busy"))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	s := p.Stop()
	if ran.Load() != 40 || s.Calls != 40 || s.Overloaded != 4 || s.Concurrency != 3 {
		t.Fatalf("ran %d, stats %+v; want 40 calls, 4 overloaded, concurrency 3", ran.Load(), s)
	}
	if most.Load() > 3 || most.Load() < 1 {
		t.Fatalf("%d calls in flight at once, want 1 to 3", most.Load())
	}
	if s.MinRate > s.MaxRate || s.MaxRate > 1000 || s.MinRate < DefaultMin {
		t.Fatalf("rates %v..%v", s.MinRate, s.MaxRate)
	}
}

// A probe reporting a deep backlog makes the Pacer back off; its stats say
// so and why.
func TestPacerBacksOffOnTheProbesBacklog(t *testing.T) {
	probed := make(chan struct{}, 1)
	probe := func(context.Context) (Backlog, error) {
		select {
		case probed <- struct{}{}:
		default:
		}
		return Backlog{Count: 10_000, Age: time.Minute}, nil
	}
	p, err := Start(Config{Max: 100, Start: 100, Interval: 5 * time.Millisecond}, probe)
	if err != nil {
		t.Fatal(err)
	}
	<-probed
	<-probed // the first decision was made after the first probe
	s := p.Stop()
	if s.Backoffs == 0 || s.MinRate >= 100 || s.LastBackoff == "" {
		t.Fatalf("stats %+v; want a backoff below 100/s", s)
	}
}

// A failing probe is counted and its interval judged without a backlog.
func TestPacerCountsProbeErrors(t *testing.T) {
	probed := make(chan struct{}, 1)
	probe := func(context.Context) (Backlog, error) {
		probed <- struct{}{}
		return Backlog{}, errors.New("no stats")
	}
	p, err := Start(Config{Interval: time.Millisecond}, probe)
	if err != nil {
		t.Fatal(err)
	}
	<-probed
	<-probed
	go func() { // let the loop finish its probe after Stop closes
		for range probed {
		}
	}()
	s := p.Stop()
	close(probed)
	if s.ProbeErrors == 0 || s.Backoffs != 0 {
		t.Fatalf("stats %+v; want probe errors and no backoff", s)
	}
}

// Go returns the context's error and runs nothing once it has ended.
func TestPacerGoAfterTheContextEnded(t *testing.T) {
	p, err := Start(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	if err := p.Go(ctx, func(context.Context) error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Go after cancel: %v, ran %v", err, ran)
	}
	if s := p.Stop(); s.Calls != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestOverloaded(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{serviceerror.NewNotFound("gone"), false},
		{serviceerror.NewResourceExhausted(0, "rps limit"), true},
		{fmt.Errorf("nudging: %w", serviceerror.NewUnavailable("down")), true},
	} {
		if got := Overloaded(tt.err); got != tt.want {
			t.Errorf("Overloaded(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
