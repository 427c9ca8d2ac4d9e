package main

import (
	"cmp"
	"maps"
	"slices"
	"sync"
)

// fate is what one answer says about whether its event was applied.
type fate int

const (
	// fateNone: the answer says nothing (409: the same key is still in
	// progress in another request, whose own answer decides).
	fateNone fate = iota
	// fateApplied: the event is applied (a success, first or replayed).
	fateApplied
	// fateNotApplied: refused before it took effect (429 and 503 release the
	// key; the entity's final refusals).
	fateNotApplied
	// fateUnknown: it may have been applied (504, the harness's timeout, a
	// broken connection, an unexpected error).
	fateUnknown
)

// httpFate classifies an HTTP answer kind.
func httpFate(kind string) fate {
	switch kind {
	case "200":
		return fateApplied
	case "409", kindDropped:
		return fateNone
	case "400", "422", "429", "503":
		return fateNotApplied
	}
	return fateUnknown
}

// clientFate classifies a Go client answer kind.
func clientFate(kind string) fate {
	switch kind {
	case kindOK:
		return fateApplied
	case kindDropped:
		return fateNone
	case kindRejected:
		return fateNotApplied
	}
	return fateUnknown
}

// event is one distinct point event of a run (its key may be sent more than once).
type event struct {
	Key string
	// Tenant is the customer's tenant ("" the default tenant).
	Tenant   string
	Customer string
	Points   int64
	applied  bool
	unknown  bool
}

// ledger remembers every event sent and what its answers said.
type ledger struct {
	mu     sync.Mutex
	events []*event
}

// add records a new event.
func (l *ledger) add(e *event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// pick returns the i-th event recorded (for a redelivery), nil if none.
func (l *ledger) pick(i int) *event {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) == 0 {
		return nil
	}
	return l.events[i%len(l.events)]
}

// busiest returns at most n customers, those with the most events first.
func (l *ledger) busiest(n int) []string {
	l.mu.Lock()
	counts := map[string]int{}
	for _, e := range l.events {
		counts[e.Customer]++
	}
	l.mu.Unlock()
	customers := slices.Collect(maps.Keys(counts))
	slices.SortFunc(customers, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b))
	})
	return customers[:min(n, len(customers))]
}

// record notes one answer for e.
func (l *ledger) record(e *event, f fate) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch f {
	case fateApplied:
		e.applied = true
	case fateUnknown:
		e.unknown = true
	}
}

// expectation is what one customer's points must be: at least Sure (events
// answered with a success), at most Sure+Unknown (events that may have been
// applied, none of whose answers was a success).
type expectation struct {
	Sure    int64
	Unknown int64
}

// expectations sums the events per customer.
func (l *ledger) expectations() map[string]expectation {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]expectation{}
	for _, e := range l.events {
		x := out[e.Customer]
		switch {
		case e.applied:
			x.Sure += e.Points
		case e.unknown:
			x.Unknown += e.Points
		}
		out[e.Customer] = x
	}
	return out
}

// CustomerCheck is the totals check of one customer.
type CustomerCheck struct {
	Customer string `json:"customer"`
	Sure     int64  `json:"sure"`
	Unknown  int64  `json:"unknown"`
	Actual   int64  `json:"actual"`
	Error    string `json:"error,omitempty"`
	OK       bool   `json:"ok"`
}

// TotalsReport is the exact-totals check of one mode.
type TotalsReport struct {
	Shape     string          `json:"shape"`
	Mode      string          `json:"mode"`
	Tenant    string          `json:"tenant,omitempty"`
	Customers int             `json:"customers"`
	Sure      int64           `json:"sure"`
	Unknown   int64           `json:"unknown"`
	Actual    int64           `json:"actual"`
	Exact     int             `json:"exact"`
	Failed    []CustomerCheck `json:"failed,omitempty"`
	OK        bool            `json:"ok"`
}

// checkTotals compares each customer's points with what the answers allow:
// Sure <= actual <= Sure+Unknown (exactly Sure when nothing is unknown). A
// customer whose points could not be read fails.
func checkTotals(want map[string]expectation, actual map[string]int64, readErr map[string]error) TotalsReport {
	r := TotalsReport{OK: true}
	customers := make([]string, 0, len(want))
	for c := range want {
		customers = append(customers, c)
	}
	slices.Sort(customers)
	for _, c := range customers {
		x := want[c]
		got, ok := actual[c]
		chk := CustomerCheck{Customer: c, Sure: x.Sure, Unknown: x.Unknown, Actual: got}
		switch {
		case readErr[c] != nil:
			chk.Error = readErr[c].Error()
		case !ok && x.Sure+x.Unknown > 0:
			chk.Error = "no points read"
		default:
			chk.OK = got >= x.Sure && got <= x.Sure+x.Unknown
		}
		r.Customers++
		r.Sure += x.Sure
		r.Unknown += x.Unknown
		r.Actual += got
		if chk.OK && got == x.Sure {
			r.Exact++
		}
		if !chk.OK {
			r.OK = false
			r.Failed = append(r.Failed, chk)
		}
	}
	return r
}
