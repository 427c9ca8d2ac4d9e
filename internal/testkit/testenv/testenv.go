// Package testenv decides what a test does about an outside service it needs
// (PostgreSQL, Redis, the Temporal CLI and its dev server): under -short it
// is skipped, so that `make test-short` starts and reaches nothing; a
// service that cannot be reached skips it too, unless REQUIRE_SERVICES is
// set (as in CI), where that is a failure.
package testenv

import (
	"os"
	"testing"
)

// RequireServicesEnv is the environment variable that turns a missing
// service into a failure instead of a skip.
const RequireServicesEnv = "REQUIRE_SERVICES"

// Short skips the test under -short, naming the service it would have used.
// Call it before reaching the service, so that -short never waits on one.
func Short(t testing.TB, service string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: not using %s", service)
	}
}

// Require does nothing when err is nil. Otherwise service could not be
// reached or found (err says why): the test fails when REQUIRE_SERVICES is
// set and is skipped when it is not.
func Require(t testing.TB, service string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv(RequireServicesEnv) != "" {
		t.Fatalf("%s is set and %s is not available: %v", RequireServicesEnv, service, err)
	} else {
		t.Skipf("%s not available: %v", service, err)
	}
}
