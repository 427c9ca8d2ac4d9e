package main

import (
	"io"
	"testing"
	"time"
)

func TestParseRates(t *testing.T) {
	got, err := parseRates(" 25, 50,100 ,200.5,")
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{25, 50, 100, 200.5}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	for _, bad := range []string{"", ",", "0", "-5", "abc", "10,x", "NaN", "Inf"} {
		if _, err := parseRates(bad); err == nil {
			t.Errorf("parseRates(%q) accepted", bad)
		}
	}
}

func TestPlanSteps(t *testing.T) {
	steps := planSteps([]float64{25, 0.01, 2.5}, 20*time.Second)
	wantCounts := []int{500, 1, 50}
	for i, s := range steps {
		if s.Count != wantCounts[i] || s.Duration != 20*time.Second {
			t.Errorf("step %d: %+v, want %d requests over 20s", i, s, wantCounts[i])
		}
	}
	if n := totalRequests(steps); n != 551 {
		t.Errorf("totalRequests = %d, want 551", n)
	}
	if d := worstCase(steps, 10*time.Second); d != 90*time.Second {
		t.Errorf("worstCase = %s, want 1m30s", d)
	}
}

// Requests are spaced evenly at 1/rate from the step's start, the last one
// due before the step ends.
func TestStepOffsets(t *testing.T) {
	s := planSteps([]float64{200}, 2*time.Second)[0]
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
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-rates", "10,20", "-step", "5s", "-modes", "http,baseline"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.steps) != 2 || cfg.steps[1].Count != 100 || len(cfg.modes) != 2 || cfg.modes[0] != "http" {
		t.Fatalf("%+v", cfg)
	}
	t.Setenv("ENTITYFLOW_API_KEY", "")
	if _, err := parseFlags([]string{"-temporal", "127.0.0.1:7233", "-api", "http://[::1]:8080/", "-api-key", "efk_k"}, io.Discard); err != nil {
		t.Fatalf("loopback refused: %v", err)
	}
	for _, args := range [][]string{
		{"-temporal", "10.0.0.5:7233"},
		{"-temporal", "example.com:7233"},
		{"-temporal", "127.0.0.1:7233", "-api", "http://192.168.1.2:8080"},
		{"-api", "http://127.0.0.1:8080", "-api-key", "efk_k"},           // an API without its server
		{"-temporal", "127.0.0.1:7233", "-api", "http://127.0.0.1:8080"}, // an API without a key
		{"-modes", "grpc"},
		{"-redeliver", "1"},
		{"-rates", "0"},
		{"-worker", "maybe"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}
