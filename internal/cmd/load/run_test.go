package main

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// scriptedTarget answers each customer's reads from a script, one entry per
// read (the last repeats); an entry below zero is a read error.
type scriptedTarget struct {
	mu     sync.Mutex
	script map[string][]int64
	reads  map[string]int
}

func (t *scriptedTarget) send(context.Context, *event) string { return kindOK }
func (t *scriptedTarget) fate(kind string) fate               { return clientFate(kind) }
func (t *scriptedTarget) workflowID(_, c string) string       { return c }

func (t *scriptedTarget) points(_ context.Context, _, c string) (int64, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.script[c]
	v := s[min(t.reads[c], len(s)-1)]
	t.reads[c]++
	if v < 0 {
		return 0, true, errors.New("query timed out")
	}
	return v, true, nil
}

// A customer settles on two equal successive reads and is not read again; a
// read error after a success keeps the success; a customer never read fails.
func TestSettleAndCheck(t *testing.T) {
	var l ledger
	for _, e := range []*event{
		{Key: "a1", Customer: "a", Points: 5, applied: true},
		{Key: "b1", Customer: "b", Points: 4, applied: true},
		{Key: "c1", Customer: "c", Points: 2, applied: true},
		{Key: "d1", Customer: "d", Points: 7, applied: true},
	} {
		l.add(e)
	}
	tgt := &scriptedTarget{reads: map[string]int{}, script: map[string][]int64{
		"a": {-1, 5, 5}, // an error first, then settles at 5
		"b": {3, 4, 4},  // still moving, then settles at 4
		"c": {-1},       // never answers
		"d": {7, -1, 7}, // answers, errors, then agrees
	}}
	r, ok := settleAndCheck(context.Background(), tgt, "", &l, 3*settleWait)
	if !ok {
		t.Fatal("a target with entities reported none")
	}
	if r.OK || len(r.Failed) != 1 || r.Failed[0].Customer != "c" || r.Failed[0].Error == "" {
		t.Fatalf("report %+v: want only c failed, with its read error", r)
	}
	if r.Actual != 16 || r.Exact != 3 {
		t.Errorf("actual %d, exact %d: want 5+4+7 read, 3 exact", r.Actual, r.Exact)
	}
	if tgt.reads["a"] != 3 || tgt.reads["b"] != 3 || tgt.reads["d"] != 3 {
		t.Errorf("reads %v: want a, b and d read until settled (3 each)", tgt.reads)
	}
}
