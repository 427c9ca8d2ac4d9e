package main

import (
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func TestParseRates(t *testing.T) {
	got, err := parseRates(" 25, 50,100 ,200.5,")
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{25, 50, 100, 200.5}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", ",", "0", "-5", "abc", "10,x", "NaN", "Inf"} {
		if _, err := parseRates(bad); err == nil {
			t.Errorf("parseRates(%q) accepted", bad)
		}
	}
}

func TestParseShapes(t *testing.T) {
	got, err := parseShapes("new, hot,tenants,")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{shapeNew, shapeHot, shapeTenants}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", ",", "zipff", "new,cold"} {
		if _, err := parseShapes(bad); err == nil {
			t.Errorf("parseShapes(%q) accepted", bad)
		}
	}
}

// phaseSummary is a plan's phase in a comparable form.
type phaseSummary struct {
	name  string
	steps string
}

func summarizePhases(sp shapePlan) []phaseSummary {
	var out []phaseSummary
	for _, ph := range sp.Phases {
		var parts []string
		for _, s := range ph.Steps {
			t := s.Tenant
			if t == "" {
				t = "default"
			}
			parts = append(parts, t+"@"+s.label()+"x"+strconv.Itoa(s.Count))
		}
		out = append(out, phaseSummary{ph.Name, strings.Join(parts, "+")})
	}
	return out
}

func TestPlanShape(t *testing.T) {
	p := shapeParams{Rates: []float64{10, 20}, Step: 2 * time.Second, Customers: 50, Burst: 0, ZipfS: 1.2}
	withBurst := p
	withBurst.Burst = 30
	tenants := p
	tenants.Rates = []float64{110}
	for _, tc := range []struct {
		shape     string
		p         shapeParams
		customers int
		warm      bool
		tenants   []string
		phases    []phaseSummary
		total     int
	}{
		{shapeUniform, p, 50, false, []string{""}, []phaseSummary{{"", "default@10/sx20"}, {"", "default@20/sx40"}}, 60},
		{shapeNew, p, 0, false, []string{""}, []phaseSummary{{"", "default@10/sx20"}, {"", "default@20/sx40"}}, 60},
		// Warming sends one event per customer before the phases.
		{shapeExisting, p, 50, true, []string{""}, []phaseSummary{{"", "default@10/sx20"}, {"", "default@20/sx40"}}, 110},
		{shapeHot, p, 1, false, []string{""}, []phaseSummary{{"", "default@10/sx20"}, {"", "default@20/sx40"}}, 60},
		{shapeHot, withBurst, 1, false, []string{""}, []phaseSummary{{"", "default@10/sx20"}, {"", "default@20/sx40"}, {phaseBurst, "default@30 at oncex30"}}, 90},
		{shapeZipf, p, 50, false, []string{""}, []phaseSummary{{"", "default@10/sx20"}, {"", "default@20/sx40"}}, 60},
		// 110/s: the quiet tenant 10/s alone, then 10/s beside the noisy 100/s.
		{shapeTenants, tenants, 50, false, []string{quietTenant, noisyTenant}, []phaseSummary{
			{phaseAlone, quietTenant + "@10/sx20"},
			{phaseWithNoisy, quietTenant + "@10/sx20+" + noisyTenant + "@100/sx200"},
		}, 240},
	} {
		t.Run(tc.shape, func(t *testing.T) {
			sp := planShape(tc.shape, tc.p)
			if sp.Shape != tc.shape || sp.Customers != tc.customers || sp.Warm != tc.warm || !slices.Equal(sp.Tenants, tc.tenants) {
				t.Errorf("plan %+v: want customers %d, warm %v, tenants %q", sp, tc.customers, tc.warm, tc.tenants)
			}
			if got := summarizePhases(sp); !slices.Equal(got, tc.phases) {
				t.Errorf("phases %v, want %v", got, tc.phases)
			}
			if n := totalRequests(sp); n != tc.total {
				t.Errorf("totalRequests = %d, want %d", n, tc.total)
			}
		})
	}
}

func TestPlanStepsRounding(t *testing.T) {
	phases := planSteps([]float64{25, 0.01, 2.5}, 20*time.Second)
	for i, want := range []int{500, 1, 50} {
		if s := phases[i].Steps[0]; s.Count != want || s.Duration != 20*time.Second {
			t.Errorf("step %d: %+v, want %d requests over 20s", i, s, want)
		}
	}
}

// The bound covers every phase's longest step and a drain each, and the
// warming in rounds of the concurrency bound.
func TestWorstCase(t *testing.T) {
	p := shapeParams{Rates: []float64{110, 220}, Step: 10 * time.Second, Customers: 250}
	if d := worstCase(planShape(shapeTenants, p), 5*time.Second, 100); d != 60*time.Second {
		t.Errorf("tenants: %s, want 1m0s (4 phases of 10s, 4 drains of 5s)", d)
	}
	if d := worstCase(planShape(shapeExisting, p), 5*time.Second, 100); d != 45*time.Second {
		t.Errorf("existing: %s, want 45s (3 warming rounds of 5s, 2 steps of 10s, 2 drains)", d)
	}
}

// Requests are spaced evenly at 1/rate from the step's start, the last one
// due before the step ends; a burst's are all due at once.
func TestStepOffsets(t *testing.T) {
	s := newStep("", 200, 2*time.Second)
	if s.offset(0) != 0 || s.offset(1) != 5*time.Millisecond || s.offset(200) != time.Second {
		t.Fatalf("offsets %s %s %s", s.offset(0), s.offset(1), s.offset(200))
	}
	if last := s.offset(s.Count - 1); last >= s.Duration {
		t.Fatalf("last request due at %s, after the step's %s", last, s.Duration)
	}
	for i := 1; i < s.Count; i++ {
		if s.offset(i) <= s.offset(i-1) {
			t.Fatalf("offset %d not after %d", i, i-1)
		}
	}
	b := planShape(shapeHot, shapeParams{Rates: []float64{1}, Step: time.Second, Burst: 5}).Phases[1].Steps[0]
	for i := range b.Count {
		if b.offset(i) != 0 {
			t.Fatalf("burst request %d due at %s", i, b.offset(i))
		}
	}
}

func TestPickers(t *testing.T) {
	const draws = 20000
	for _, tc := range []struct {
		sp shapePlan
		// check sees every draw's customer index and the draw's seq.
		check func(t *testing.T, counts map[int]int)
	}{
		{shapePlan{Shape: shapeNew}, func(t *testing.T, counts map[int]int) {
			if len(counts) != draws {
				t.Errorf("%d distinct customers in %d draws, want every one new", len(counts), draws)
			}
		}},
		{shapePlan{Shape: shapeHot, Customers: 1}, func(t *testing.T, counts map[int]int) {
			if counts[0] != draws {
				t.Errorf("counts %v, want all on customer 0", counts)
			}
		}},
		{shapePlan{Shape: shapeUniform, Customers: 10}, func(t *testing.T, counts map[int]int) {
			for i := range 10 {
				if c := counts[i]; c < draws/10*8/10 || c > draws/10*12/10 {
					t.Errorf("customer %d drawn %d times of %d, want about %d", i, c, draws, draws/10)
				}
			}
			if len(counts) != 10 {
				t.Errorf("%d customers drawn, want 10", len(counts))
			}
		}},
		{shapePlan{Shape: shapeExisting, Customers: 200}, func(t *testing.T, counts map[int]int) {
			for i := range counts {
				if i < 0 || i >= 200 {
					t.Errorf("customer %d out of [0, 200)", i)
				}
			}
		}},
	} {
		t.Run(tc.sp.Shape, func(t *testing.T) {
			pick := newPicker(tc.sp, rand.New(rand.NewPCG(7, 8)))
			counts := map[int]int{}
			for seq := 1; seq <= draws; seq++ {
				counts[pick(seq)]++
			}
			tc.check(t, counts)
		})
	}
}

// The Zipf draw stays in the customer space and follows the law: the most
// frequent customers are the lowest ranks, each drawn about N*(1+k)^-s/H
// times.
func TestZipfPicker(t *testing.T) {
	const draws, customers, s = 200000, 100000, 1.1
	pick := newPicker(shapePlan{Shape: shapeZipf, Customers: customers, ZipfS: s}, rand.New(rand.NewPCG(3, 4)))
	counts := map[int]int{}
	for seq := 1; seq <= draws; seq++ {
		k := pick(seq)
		if k < 0 || k >= customers {
			t.Fatalf("customer %d out of [0, %d)", k, customers)
		}
		counts[k]++
	}
	h := 0.0
	for k := range customers {
		h += math.Pow(1+float64(k), -s)
	}
	for _, k := range []int{0, 1, 2, 9, 99} {
		want := draws * math.Pow(1+float64(k), -s) / h
		if got := float64(counts[k]); math.Abs(got-want) > 0.1*want+3*math.Sqrt(want) {
			t.Errorf("rank %d drawn %v times, want about %.0f", k, got, want)
		}
	}
	if counts[0] <= counts[1] || counts[1] <= counts[9] {
		t.Errorf("ranks 0, 1, 9 drawn %d, %d, %d times: want decreasing", counts[0], counts[1], counts[9])
	}
	// A long tail: many customers, most seen once or twice.
	if len(counts) < draws/10 {
		t.Errorf("%d distinct customers in %d draws: no tail", len(counts), draws)
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-rates", "10,20", "-step", "5s", "-modes", "http,baseline"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.plans) != 1 || cfg.plans[0].Shape != shapeUniform || len(cfg.plans[0].Phases) != 2 ||
		cfg.plans[0].Phases[1].Steps[0].Count != 100 || !slices.Equal(cfg.modes, []string{"http", "baseline"}) {
		t.Fatalf("%+v", cfg)
	}

	// Each shape takes its own defaults unless the flags are given.
	cfg, err = parseFlags([]string{"-shape", "zipf,existing,hot", "-burst", "300", "-cache", "1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	zipf, existing, hot := cfg.plans[0], cfg.plans[1], cfg.plans[2]
	if zipf.Customers != 100_000 || zipf.ZipfS != 1.1 || zipf.Phases[0].Steps[0].Duration != 5*time.Minute || zipf.Phases[0].Steps[0].Rate != 100 {
		t.Errorf("zipf defaults: %+v", zipf)
	}
	if existing.Customers != 200 || !existing.Warm {
		t.Errorf("existing defaults: %+v", existing)
	}
	if cfg, err := parseFlags([]string{"-shape", "tenants", "-tenant-rate", "20"}, io.Discard); err != nil || cfg.tenantRate != 20 {
		t.Errorf("-tenant-rate 20: %v, %v", cfg.tenantRate, err)
	}
	if l := tenantLimiter(0); l.Rate != rate.Inf {
		t.Errorf("no -tenant-rate: limiter %+v, want none", l)
	}
	if l := tenantLimiter(20); l.Rate != 20 || l.Burst != 20 {
		t.Errorf("-tenant-rate 20: limiter %+v, want 20/s in bursts of 20", l)
	}
	if len(hot.Phases) != 5 || hot.Phases[4].Steps[0].Count != 300 || cfg.concurrency != 300 || cfg.cache != 1 {
		t.Errorf("hot with a burst of 300: %+v, concurrency %d", hot, cfg.concurrency)
	}
	cfg, err = parseFlags([]string{"-shape", "zipf", "-step", "3s", "-customers", "1000", "-rates", "5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.plans[0].Phases[0].Steps[0]; cfg.plans[0].Customers != 1000 || s.Duration != 3*time.Second || s.Count != 15 {
		t.Errorf("zipf with flags: %+v", cfg.plans[0])
	}

	// A standing start: no warm-up, one request to the first customer of
	// each shape that does not warm its customers, then the full rate.
	cfg, err = parseFlags([]string{"-shape", "hot,existing", "-standing-start", "-rates", "1000", "-step", "8s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if hot, existing := cfg.plans[0], cfg.plans[1]; cfg.warmup != 0 || !cfg.standing || !hot.Prime || hot.Warm || existing.Prime || !existing.Warm ||
		len(hot.Phases) != 1 || hot.Phases[0].Steps[0].Count != 8000 {
		t.Errorf("-standing-start: warmup %s, hot %+v, existing %+v", cfg.warmup, hot, existing)
	}
	if cfg, err := parseFlags([]string{"-standing-start", "-warmup", "0"}, io.Discard); err != nil || cfg.warmup != 0 || !cfg.plans[0].Prime {
		t.Errorf("-standing-start -warmup 0: %v, %+v", err, cfg)
	}
	if cfg, err := parseFlags([]string{"-entity-inflight", "2"}, io.Discard); err != nil || cfg.inFlight != 2 {
		t.Errorf("-entity-inflight 2: %v, %d", err, cfg.inFlight)
	}
	if cfg, err := parseFlags([]string{"-entity-inflight", "1"}, io.Discard); err != nil || cfg.batchAfter != 1 {
		t.Errorf("-entity-inflight 1: %v, batch after %d, want 1 (the default 2 bounded by the slots)", err, cfg.batchAfter)
	}
	if cfg, err := parseFlags([]string{"-entity-batch-after", "0"}, io.Discard); err != nil || cfg.batchAfter != 0 {
		t.Errorf("-entity-batch-after 0: %v, %d", err, cfg.batchAfter)
	}
	if cfg, err := parseFlags([]string{"-shape", "hot"}, io.Discard); err != nil || cfg.warmup != 5*time.Second || cfg.plans[0].Prime {
		t.Errorf("no -standing-start: warmup %s, prime %v, %v", cfg.warmup, cfg.plans[0].Prime, err)
	}

	t.Setenv("ENTITYFLOW_API_KEY", "")
	t.Setenv("ENTITYFLOW_TENANT_API_KEYS", "")
	if _, err := parseFlags([]string{"-temporal", "127.0.0.1:7233", "-api", "http://[::1]:8080/", "-api-key", "efk_k"}, io.Discard); err != nil {
		t.Fatalf("loopback refused: %v", err)
	}
	cfg, err = parseFlags([]string{"-shape", "tenants", "-temporal", "127.0.0.1:7233", "-api", "http://127.0.0.1:8080", "-api-key", "efk_k", "-tenant-api-keys", "efk_q,efk_n"}, io.Discard)
	if err != nil || !slices.Equal(cfg.tenantKeys, []string{"efk_q", "efk_n"}) {
		t.Fatalf("tenant keys: %v, %v", cfg.tenantKeys, err)
	}
	for _, args := range [][]string{
		{"-temporal", "10.0.0.5:7233"},
		{"-temporal", "example.com:7233"},
		{"-temporal", "127.0.0.1:7233", "-api", "http://192.168.1.2:8080"},
		{"-api", "http://127.0.0.1:8080", "-api-key", "efk_k"},                                                     // an API without its server
		{"-temporal", "127.0.0.1:7233", "-api", "http://127.0.0.1:8080"},                                           // an API without a key
		{"-shape", "tenants", "-temporal", "127.0.0.1:7233", "-api", "http://127.0.0.1:8080", "-api-key", "efk_k"}, // no tenant keys
		{"-modes", "grpc"},
		{"-shape", "cold"},
		{"-redeliver", "1"},
		{"-rates", "0"},
		{"-step", "0s"},
		{"-customers", "0"},
		{"-burst", "-1"},
		{"-cache", "-1"},
		{"-drain", "-1s"},
		{"-warmup", "-1s"},
		{"-standing-start", "-warmup", "5s"}, // a standing start has no warm-up
		{"-entity-inflight", "-1"},
		{"-entity-inflight", "11"}, // beyond Temporal's 10 in-flight updates per workflow
		{"-temporal", "127.0.0.1:7233", "-api", "http://127.0.0.1:8080", "-api-key", "efk_k", "-entity-inflight", "2"}, // a running API's admission is its own
		{"-entity-batch-after", "-1"},
		{"-entity-inflight", "4", "-entity-batch-after", "5"}, // more than the customer's slots
		{"-temporal", "127.0.0.1:7233", "-api", "http://127.0.0.1:8080", "-api-key", "efk_k", "-entity-batch-after", "1"}, // a running API's coalescer is its own
		{"-tenant-rate", "-1"},
		{"-temporal", "127.0.0.1:7233", "-api", "http://127.0.0.1:8080", "-api-key", "efk_k", "-tenant-rate", "20"}, // a running API's limits are its own
		{"-zipf-s", "1"},
		{"-worker", "maybe"},
		{"-server", "prod"},
		{"-server", "cluster", "-temporal", "127.0.0.1:7233"},
		{"-server", "cluster", "-dev-db", "x.db"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

// The API keys come from the environment unless a flag gives them, and -h
// names their variables.
func TestParseFlagsEnvironment(t *testing.T) {
	api := []string{"-shape", "tenants", "-temporal", "127.0.0.1:7233", "-api", "http://127.0.0.1:8080"}
	t.Setenv("ENTITYFLOW_API_KEY", "efk_env")
	t.Setenv("ENTITYFLOW_TENANT_API_KEYS", "efk_q,efk_n")
	cfg, err := parseFlags(api, io.Discard)
	if err != nil || cfg.apiKey != "efk_env" || !slices.Equal(cfg.tenantKeys, []string{"efk_q", "efk_n"}) {
		t.Fatalf("from the environment: key %q, tenant keys %v, error %v", cfg.apiKey, cfg.tenantKeys, err)
	}
	if cfg, err = parseFlags(append(api, "-api-key", "efk_flag"), io.Discard); err != nil || cfg.apiKey != "efk_flag" {
		t.Fatalf("flag over environment: key %q, error %v", cfg.apiKey, err)
	}
	var help strings.Builder
	if _, err := parseFlags([]string{"-h"}, &help); err == nil {
		t.Fatal("-h: no error")
	}
	for _, env := range environment {
		if !strings.Contains(help.String(), "(env "+env+")") {
			t.Errorf("help does not name %s:\n%s", env, help.String())
		}
	}
}
