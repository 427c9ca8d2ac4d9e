package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// The shapes of traffic the harness offers, in the order they run.
const (
	// shapeUniform: events spread evenly over -customers at stepped rates.
	shapeUniform = "uniform"
	// shapeNew: every event to a customer never seen before (the run's own
	// ID space, so a rerun is new again), the cost of starting entities.
	shapeNew = "new"
	// shapeExisting: -customers entities warmed first (one event each, not
	// measured), then events spread evenly over them; with -cache 1 every
	// workflow task replays its entity's history (cache-cold).
	shapeExisting = "existing"
	// shapeHot: one customer at stepped rates, then -burst commands at once.
	shapeHot = "hot"
	// shapeZipf: customers drawn from a Zipf law over -customers (100,000 by
	// default), one long step (5 minutes by default).
	shapeZipf = "zipf"
	// shapeTenants: two tenants; the noisy one offers noisyFactor times the
	// quiet one's rate. Each rate runs twice: the quiet tenant alone, then
	// both together.
	shapeTenants = "tenants"
)

var allShapes = []string{shapeUniform, shapeNew, shapeExisting, shapeHot, shapeZipf, shapeTenants}

// The tenants of the tenants shape and the noisy one's multiple.
const (
	quietTenant = "load-quiet"
	noisyTenant = "load-noisy"
	noisyFactor = 10
)

// Phase names: a phase runs its steps together.
const (
	phaseAlone     = "alone"
	phaseWithNoisy = "with-noisy"
	phaseBurst     = "burst"
)

// shapeDefaults are a shape's -rates, -step and -customers when the flags
// are not given.
type shapeDefaults struct {
	Rates     string
	Step      time.Duration
	Customers int
}

var defaults = map[string]shapeDefaults{
	shapeUniform:  {"50,100,200,400", 5 * time.Second, 20},
	shapeNew:      {"30", 10 * time.Second, 0},
	shapeExisting: {"50", 10 * time.Second, 200},
	shapeHot:      {"25,50,100,200", 5 * time.Second, 1},
	shapeZipf:     {"100", 5 * time.Minute, 100_000},
	// 110/s in all: the quiet tenant 10/s, the noisy one 100/s; 20
	// customers each.
	shapeTenants: {"110", 10 * time.Second, 20},
}

// step is one lane of a phase: Count requests of Tenant's customers ("" the
// default tenant) offered at Rate per second, evenly spaced over Duration;
// a Burst step sends its Count requests at once.
type step struct {
	Tenant   string
	Rate     float64
	Duration time.Duration
	Count    int
	Burst    bool
}

// phase is steps run together (the two tenants of the tenants shape), named
// for the report ("" for a plain step).
type phase struct {
	Name  string
	Steps []step
}

// shapePlan is what one shape offers each mode.
type shapePlan struct {
	Shape string
	// Customers is the customer space per tenant: ignored by new (a new
	// customer per event), 1 for hot.
	Customers int
	// Warm sends one unmeasured event to each customer before the phases.
	Warm bool
	// Prime, for a plan that does not Warm, sends one unmeasured event to
	// the first customer (of each tenant) and awaits its answer before the
	// phases, which then start at their full rate: a standing start
	// (-standing-start), the entity created and nothing else warm.
	Prime bool
	// ZipfS is the Zipf exponent (> 1) of the zipf shape.
	ZipfS   float64
	Tenants []string
	Phases  []phase
}

// shapeParams are the flags a plan is made from.
type shapeParams struct {
	Rates     []float64
	Step      time.Duration
	Customers int
	Burst     int
	ZipfS     float64
}

// parseShapes reads a comma-separated list of shape names.
func parseShapes(s string) ([]string, error) {
	return parseList(s, "shapes", func(f string) (string, error) {
		if _, ok := defaults[f]; !ok {
			return "", fmt.Errorf("shape %q: want one of %s", f, strings.Join(allShapes, ", "))
		}
		return f, nil
	})
}

// parseRates reads a comma-separated list of positive request rates per second.
func parseRates(s string) ([]float64, error) {
	return parseList(s, "rates", func(f string) (float64, error) {
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 || math.IsInf(r, 0) || math.IsNaN(r) {
			return 0, fmt.Errorf("rate %q: want a positive number of requests per second", f)
		}
		return r, nil
	})
}

// parseList reads a comma-separated list of at least one item with parse,
// passing over blank items; what names the items when there is none.
func parseList[T any](s, what string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s in %q", what, s)
	}
	return out, nil
}

// newStep is a step of d at rate r: rate*d requests (rounded, at least one).
func newStep(tenant string, r float64, d time.Duration) step {
	return step{Tenant: tenant, Rate: r, Duration: d, Count: max(int(math.Round(r*d.Seconds())), 1)}
}

// planSteps turns rates into single-step phases of d each for the default tenant.
func planSteps(rates []float64, d time.Duration) []phase {
	phases := make([]phase, 0, len(rates))
	for _, r := range rates {
		phases = append(phases, phase{Steps: []step{newStep("", r, d)}})
	}
	return phases
}

// planShape makes a shape's plan from its parameters.
func planShape(shape string, p shapeParams) shapePlan {
	sp := shapePlan{Shape: shape, Customers: p.Customers, Tenants: []string{""}}
	switch shape {
	case shapeTenants:
		sp.Tenants = []string{quietTenant, noisyTenant}
		for _, r := range p.Rates {
			q := r / (1 + noisyFactor)
			sp.Phases = append(sp.Phases,
				phase{Name: phaseAlone, Steps: []step{newStep(quietTenant, q, p.Step)}},
				phase{Name: phaseWithNoisy, Steps: []step{newStep(quietTenant, q, p.Step), newStep(noisyTenant, q*noisyFactor, p.Step)}})
		}
		return sp
	case shapeHot:
		sp.Customers = 1
	case shapeNew:
		sp.Customers = 0
	case shapeExisting:
		sp.Warm = true
	case shapeZipf:
		sp.ZipfS = p.ZipfS
	}
	sp.Phases = planSteps(p.Rates, p.Step)
	if shape == shapeHot && p.Burst > 0 {
		sp.Phases = append(sp.Phases, phase{Name: phaseBurst, Steps: []step{{Rate: float64(p.Burst), Count: p.Burst, Burst: true}}})
	}
	return sp
}

// offset is when the step's i-th request (from 0) is due after the step
// starts: requests are spaced 1/Rate apart, whatever the answers do (open
// loop); all at once in a burst.
func (s step) offset(i int) time.Duration {
	if s.Burst {
		return 0
	}
	return time.Duration(float64(i) / s.Rate * float64(time.Second))
}

// label names a step in the report: its offered rate, or the burst's size.
func (s step) label() string {
	if s.Burst {
		return fmt.Sprintf("%d at once", s.Count)
	}
	return fmt.Sprintf("%.4g/s", s.Rate)
}

// totalRequests is the most requests a plan can send, warming included.
func totalRequests(sp shapePlan) int {
	n := 0
	if sp.Warm {
		n += sp.Customers * len(sp.Tenants)
	}
	for _, ph := range sp.Phases {
		for _, s := range ph.Steps {
			n += s.Count
		}
	}
	return n
}

// worstCase bounds a plan's time: every phase (its longest step), each
// followed by a drain of at most one request deadline, and the warming.
func worstCase(sp shapePlan, timeout time.Duration, concurrency int) time.Duration {
	var d time.Duration
	if sp.Warm {
		rounds := (sp.Customers*len(sp.Tenants) + concurrency - 1) / concurrency
		d += time.Duration(rounds) * timeout
	}
	for _, ph := range sp.Phases {
		var longest time.Duration
		for _, s := range ph.Steps {
			longest = max(longest, s.Duration)
		}
		d += longest + timeout
	}
	return d
}

// picker draws the customer (an index into the shape's customer space) of a
// new event; seq is the event's number in its generator, from 1.
type picker func(seq int) int

// newPicker returns the shape's customer draw.
func newPicker(sp shapePlan, rng *rand.Rand) picker {
	switch {
	case sp.Shape == shapeNew:
		return func(seq int) int { return seq }
	case sp.Shape == shapeZipf:
		z := rand.NewZipf(rng, sp.ZipfS, 1, uint64(sp.Customers-1))
		return func(int) int { return int(z.Uint64()) }
	case sp.Customers <= 1:
		return func(int) int { return 0 }
	}
	n := sp.Customers
	return func(int) int { return rng.IntN(n) }
}
