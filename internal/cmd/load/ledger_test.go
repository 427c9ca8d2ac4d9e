package main

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestFates(t *testing.T) {
	for kind, want := range map[string]fate{
		"200": fateApplied, "409": fateNone, kindDropped: fateNone,
		"429": fateNotApplied, "503": fateNotApplied, "422": fateNotApplied, "400": fateNotApplied,
		"504": fateUnknown, "500": fateUnknown, kindTimeout: fateUnknown, kindError: fateUnknown,
	} {
		if got := httpFate(kind); got != want {
			t.Errorf("httpFate(%s) = %d, want %d", kind, got, want)
		}
	}
	for kind, want := range map[string]fate{
		kindOK: fateApplied, kindRejected: fateNotApplied, kindDropped: fateNone,
		kindUnknown: fateUnknown, kindTimeout: fateUnknown, kindUnavailable: fateUnknown, kindOther: fateUnknown,
	} {
		if got := clientFate(kind); got != want {
			t.Errorf("clientFate(%s) = %d, want %d", kind, got, want)
		}
	}
}

// An event counts once however many of its deliveries succeeded; a success
// settles an event whatever its other answers said; an event with no
// success but an unknown answer counts in the unknown sum only.
func TestLedgerExpectations(t *testing.T) {
	var l ledger
	a := &event{Key: "a", Customer: "c1", Points: 5}
	b := &event{Key: "b", Customer: "c1", Points: 7}
	c := &event{Key: "c", Customer: "c1", Points: 100}
	d := &event{Key: "d", Customer: "c2", Points: 3}
	e := &event{Key: "e", Customer: "c2", Points: 9}
	for _, ev := range []*event{a, b, c, d, e} {
		l.add(ev)
	}
	l.record(a, fateApplied)
	l.record(a, fateApplied) // redelivery, replayed
	l.record(b, fateUnknown)
	l.record(b, fateApplied) // the retry settled it
	l.record(c, fateNotApplied)
	l.record(d, fateNone) // 409 while the first was in flight
	l.record(d, fateUnknown)
	l.record(e, fateUnknown)
	l.record(e, fateNotApplied) // released: the unknown one may still have applied
	got := l.expectations()
	if got["c1"] != (expectation{Sure: 12}) || got["c2"] != (expectation{Unknown: 12}) {
		t.Fatalf("%+v", got)
	}
	if l.pick(0) != a || l.pick(7) != c {
		t.Fatal("pick does not wrap around the recorded events")
	}
	if (&ledger{}).pick(3) != nil {
		t.Fatal("pick on an empty ledger")
	}
}

func TestCheckTotals(t *testing.T) {
	want := map[string]expectation{
		"exact":   {Sure: 10},
		"inrange": {Sure: 10, Unknown: 5},
		"low":     {Sure: 10, Unknown: 5},
		"high":    {Sure: 10},
		"unread":  {Sure: 1},
		"none":    {},
	}
	actual := map[string]int64{"exact": 10, "inrange": 13, "low": 9, "high": 11, "none": 0}
	r := checkTotals(want, actual, map[string]error{"unread": errors.New("boom")})
	if r.OK || r.Customers != 6 || r.Exact != 2 || r.Sure != 41 || r.Unknown != 10 || r.Actual != 43 {
		t.Fatalf("%+v", r)
	}
	var failed []string
	for _, f := range r.Failed {
		failed = append(failed, f.Customer)
	}
	if len(failed) != 3 || failed[0] != "high" || failed[1] != "low" || failed[2] != "unread" {
		t.Fatalf("failed %v", failed)
	}
	ok := checkTotals(map[string]expectation{"a": {Sure: 4, Unknown: 2}}, map[string]int64{"a": 6}, nil)
	if !ok.OK || ok.Exact != 0 {
		t.Fatalf("%+v", ok)
	}
	missing := checkTotals(map[string]expectation{"a": {Sure: 4}}, map[string]int64{}, nil)
	if missing.OK {
		t.Fatal("a customer with points due and none read passed")
	}
}

// Redeliveries repeat earlier events (same key), new events get new keys,
// and the share of redeliveries follows -redeliver.
func TestGenerator(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	g := &generator{rng: rng, prefix: "p", pick: newPicker(shapePlan{Shape: shapeUniform, Customers: 3}, rng), redeliver: 0.25, led: &ledger{}}
	seen := map[string]bool{}
	again := 0
	for range 4000 {
		e, repeat := g.next()
		if repeat {
			again++
			if !seen[e.Key] {
				t.Fatalf("redelivery of unseen key %s", e.Key)
			}
			continue
		}
		if seen[e.Key] {
			t.Fatalf("new event reuses key %s", e.Key)
		}
		if e.Points < 1 || e.Points > 10 || (e.Customer != "p-0" && e.Customer != "p-1" && e.Customer != "p-2") {
			t.Fatalf("event %+v", e)
		}
		seen[e.Key] = true
		g.led.add(e)
	}
	if again < 800 || again > 1200 {
		t.Fatalf("%d redeliveries of 4000 at 0.25", again)
	}
}

// The drain watches the customers with the most events first.
func TestLedgerBusiest(t *testing.T) {
	var l ledger
	for _, c := range []string{"b", "a", "c", "a", "c", "a", "d"} {
		l.add(&event{Key: c, Customer: c})
	}
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{0, []string{}},
		{1, []string{"a"}},
		{3, []string{"a", "c", "b"}},
		{10, []string{"a", "c", "b", "d"}},
	} {
		if got := l.busiest(tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("busiest(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
