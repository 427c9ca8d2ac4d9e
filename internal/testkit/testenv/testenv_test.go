package testenv_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/entityflow/entityflow/internal/testkit/testenv"
)

// recorder is a testing.TB that records how Require ended the test.
type recorder struct {
	testing.TB
	ended string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.ended = "fatal: " + fmt.Sprintf(format, args...)
}

func (r *recorder) Skipf(format string, args ...any) {
	r.ended = "skip: " + fmt.Sprintf(format, args...)
}

func TestRequire(t *testing.T) {
	down := errors.New("connection refused")
	for _, tc := range []struct {
		name, require string
		err           error
		want          string
	}{
		{"reachable", "", nil, ""},
		{"reachable, required", "1", nil, ""},
		{"missing", "", down, "skip: Redis not available: connection refused"},
		{"missing, required", "1", down, "fatal: REQUIRE_SERVICES is set and Redis is not available: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(testenv.RequireServicesEnv, tc.require)
			r := &recorder{TB: t}
			testenv.Require(r, "Redis", tc.err)
			if r.ended != tc.want {
				t.Fatalf("Require ended the test with %q, want %q", r.ended, tc.want)
			}
		})
	}
}
