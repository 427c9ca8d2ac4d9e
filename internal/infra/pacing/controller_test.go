package pacing

import (
	"strings"
	"testing"
	"time"
)

// testConfig is a config with round numbers: start 20/s, +10, ×0.5,
// between 1 and 100/s, latency under 100 ms, backlog under 50 tasks and 1 s.
func testConfig() Config {
	return Config{Max: 100, Min: 1, Start: 20, Step: 10, Decrease: 0.5, Concurrency: 4, Interval: time.Second,
		LatencyTarget: 100 * time.Millisecond, BacklogTarget: 50, BacklogAgeTarget: time.Second}
}

func TestControllerDecisions(t *testing.T) {
	sec := time.Second
	tests := []struct {
		name    string
		rate    float64 // the rate before the window
		w       Window
		want    Decision
		because string // in the reason
	}{
		{name: "healthy and used: additive increase", rate: 20,
			w: Window{Elapsed: sec, Calls: 20, Latency: 10 * time.Millisecond}, want: Decision{Rate: 30, Verdict: Increase}},
		{name: "healthy with an empty backlog", rate: 20,
			w: Window{Elapsed: sec, Calls: 19, Latency: 10 * time.Millisecond, Backlog: &Backlog{}}, want: Decision{Rate: 30, Verdict: Increase}},
		{name: "increase stops at the ceiling", rate: 95,
			w: Window{Elapsed: sec, Calls: 95, Latency: 10 * time.Millisecond}, want: Decision{Rate: 100, Verdict: Increase}},
		{name: "at the ceiling: hold", rate: 100,
			w: Window{Elapsed: sec, Calls: 100, Latency: 10 * time.Millisecond}, want: Decision{Rate: 100, Verdict: Hold}},
		{name: "rate not used (concurrency or listing bound): hold", rate: 50,
			w: Window{Elapsed: sec, Calls: 30, Latency: 10 * time.Millisecond}, want: Decision{Rate: 50, Verdict: Hold}},
		{name: "rate used over a longer interval", rate: 50,
			w: Window{Elapsed: 2 * sec, Calls: 90, Latency: 10 * time.Millisecond}, want: Decision{Rate: 60, Verdict: Increase}},
		{name: "no call ended: hold", rate: 20, w: Window{Elapsed: sec}, want: Decision{Rate: 20, Verdict: Hold}},
		{name: "healthy calls but the probe failed: hold", rate: 20,
			w: Window{Elapsed: sec, Calls: 20, Latency: 10 * time.Millisecond, ProbeFailed: true}, want: Decision{Rate: 20, Verdict: Hold}, because: "probe did not answer"},
		{name: "a slow call with the probe failed: halve", rate: 40,
			w: Window{Elapsed: sec, Calls: 40, Latency: 150 * time.Millisecond, ProbeFailed: true}, want: Decision{Rate: 20, Verdict: Decrease}},
		{name: "latency over the target: halve", rate: 40,
			w: Window{Elapsed: sec, Calls: 40, Latency: 150 * time.Millisecond}, want: Decision{Rate: 20, Verdict: Decrease}, because: "latency p90 150ms over the target 100ms"},
		{name: "latency at the target is healthy", rate: 40,
			w: Window{Elapsed: sec, Calls: 40, Latency: 100 * time.Millisecond}, want: Decision{Rate: 50, Verdict: Increase}},
		{name: "backlog age over the target: halve", rate: 40,
			w: Window{Elapsed: sec, Calls: 40, Latency: time.Millisecond, Backlog: &Backlog{Count: 3, Age: 2 * sec}}, want: Decision{Rate: 20, Verdict: Decrease}, because: "backlog age 2s"},
		{name: "backlog count over the target: halve", rate: 40,
			w: Window{Elapsed: sec, Calls: 40, Latency: time.Millisecond, Backlog: &Backlog{Count: 51}}, want: Decision{Rate: 20, Verdict: Decrease}, because: "backlog 51 over the target 50"},
		{name: "backlog over the target with no call ended: still halve", rate: 40,
			w: Window{Elapsed: sec, Backlog: &Backlog{Count: 500, Age: 3 * sec}}, want: Decision{Rate: 20, Verdict: Decrease}},
		{name: "overload errors: quarter", rate: 40,
			w: Window{Elapsed: sec, Calls: 40, Overloaded: 2, Latency: time.Millisecond}, want: Decision{Rate: 10, Verdict: Overload}, because: "2 of 40 calls refused"},
		{name: "overload beats a slow call", rate: 40,
			w: Window{Elapsed: sec, Calls: 40, Overloaded: 1, Latency: sec}, want: Decision{Rate: 10, Verdict: Overload}},
		{name: "decrease stops at the floor", rate: 1.5,
			w: Window{Elapsed: sec, Calls: 2, Latency: sec}, want: Decision{Rate: 1, Verdict: Decrease}},
		{name: "overload at the floor stays there", rate: 1,
			w: Window{Elapsed: sec, Calls: 1, Overloaded: 1}, want: Decision{Rate: 1, Verdict: Overload}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewController(testConfig())
			c.rate = tt.rate
			got := c.Next(tt.w)
			if got.Rate != tt.want.Rate || got.Verdict != tt.want.Verdict || !strings.Contains(got.Reason, tt.because) {
				t.Fatalf("Next(%+v) at %v/s = %+v, want %+v with a reason containing %q", tt.w, tt.rate, got, tt.want, tt.because)
			}
			if c.Rate() != got.Rate {
				t.Fatalf("Rate() %v after a decision of %v", c.Rate(), got.Rate)
			}
			if got.BackedOff() != (got.Verdict == Decrease || got.Verdict == Overload) {
				t.Fatalf("BackedOff() %v for %s", got.BackedOff(), got.Verdict)
			}
		})
	}
}

// A sequence of windows: the rate climbs by steps while healthy, halves at
// a slow interval and climbs again: the sawtooth of AIMD.
func TestControllerSawtooth(t *testing.T) {
	c := NewController(testConfig())
	healthy := func() Window {
		return Window{Elapsed: time.Second, Calls: int(c.Rate()), Latency: time.Millisecond}
	}
	slow := Window{Elapsed: time.Second, Calls: 10, Latency: time.Second}
	var rates []float64
	for _, w := range []func() Window{healthy, healthy, healthy, func() Window { return slow }, healthy, healthy} {
		rates = append(rates, c.Next(w()).Rate)
	}
	want := []float64{30, 40, 50, 25, 35, 45}
	for i := range want {
		if rates[i] != want[i] {
			t.Fatalf("rates %v, want %v", rates, want)
		}
	}
}

// After a decrease for a backlog the rate settles for Settle: the backlog
// still reported then (the server's statistics trail the queue) neither
// halves it again nor lets it rise, while a slow call still lowers it.
func TestControllerSettlesAfterABacklogDecrease(t *testing.T) {
	cfg := testConfig()
	cfg.Settle = 3 * time.Second
	c := NewController(cfg)
	c.rate = 80
	sec := time.Second
	backlog := Window{Elapsed: sec, Calls: 80, Latency: time.Millisecond, Backlog: &Backlog{Count: 90, Age: 2 * sec}}
	healthy := Window{Elapsed: sec, Calls: 40, Latency: time.Millisecond, Backlog: &Backlog{}}
	slow := Window{Elapsed: sec, Calls: 40, Latency: sec, Backlog: &Backlog{}}
	steps := []struct {
		w       Window
		want    Decision
		because string
	}{
		{backlog, Decision{Rate: 40, Verdict: Decrease}, "backlog age 2s"},
		{backlog, Decision{Rate: 40, Verdict: Hold}, "settling after the last decrease"},
		{healthy, Decision{Rate: 40, Verdict: Hold}, ""},
		{slow, Decision{Rate: 20, Verdict: Decrease}, "latency p90"},
		{Window{Elapsed: sec, Calls: 20, Latency: time.Millisecond}, Decision{Rate: 30, Verdict: Increase}, ""},
		{backlog, Decision{Rate: 15, Verdict: Decrease}, "backlog age 2s"},
	}
	for i, st := range steps {
		got := c.Next(st.w)
		if got.Rate != st.want.Rate || got.Verdict != st.want.Verdict || !strings.Contains(got.Reason, st.because) {
			t.Fatalf("step %d: %+v, want %+v with a reason containing %q", i, got, st.want, st.because)
		}
	}
}

func TestConfigWithDefaults(t *testing.T) {
	got, err := Config{}.WithDefaults()
	want := Config{Max: DefaultMax, Min: DefaultMin, Start: DefaultStart, Step: DefaultStep, Decrease: DefaultDecrease,
		Concurrency: DefaultConcurrency, Interval: DefaultInterval, LatencyTarget: DefaultLatencyTarget,
		BacklogTarget: DefaultBacklogTarget, BacklogAgeTarget: DefaultBacklogAgeTarget, Settle: DefaultSettle}
	if err != nil || got != want {
		t.Fatalf("defaults %+v, %v; want %+v", got, err, want)
	}
	// A ceiling under the default start and floor pulls them down: -rate 0.5
	// alone is a fixed half a signal a second.
	if got, err := (Config{Max: 0.5}).WithDefaults(); err != nil || got.Min != 0.5 || got.Start != 0.5 {
		t.Fatalf("max 0.5: %+v, %v", got, err)
	}
	// Min equal to Max: a fixed rate.
	if got, err := (Config{Max: 30, Min: 30}).WithDefaults(); err != nil || got.Start != 30 {
		t.Fatalf("fixed 30: %+v, %v", got, err)
	}
	nan := func() float64 { var z float64; return z / z }()
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Max: -1}, "rate -1: must be a positive number"},
		{Config{Max: nan}, "rate NaN: must be a positive number"},
		{Config{Min: -2}, "minimum rate -2"},
		{Config{Start: -2}, "start rate -2"},
		{Config{Step: -2}, "rate step -2"},
		{Config{Decrease: 1}, "decrease 1: must be more than 0 and less than 1"},
		{Config{Decrease: -0.1}, "decrease -0.1"},
		{Config{Concurrency: -1}, "concurrency -1"},
		{Config{LatencyTarget: -time.Second}, "must be positive durations"},
		{Config{BacklogTarget: -1}, "backlog target -1"},
		{Config{Max: 10, Min: 20}, "minimum rate 20 is above the rate's ceiling 10"},
	} {
		if _, err := tt.cfg.WithDefaults(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var ds []time.Duration
		for _, x := range v {
			ds = append(ds, time.Duration(x)*time.Millisecond)
		}
		return ds
	}
	for _, tt := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{ms(5), 5 * time.Millisecond},
		{ms(10, 1, 9, 2, 8, 3, 7, 4, 6, 5), 9 * time.Millisecond},
		{ms(1, 100), 100 * time.Millisecond},
	} {
		if got := percentile(tt.in, 0.9); got != tt.want {
			t.Errorf("p90 of %v = %v, want %v", tt.in, got, tt.want)
		}
	}
}
