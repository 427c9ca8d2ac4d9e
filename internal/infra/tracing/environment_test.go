package tracing

import (
	"strings"
	"testing"
)

// Environment names every variable tracing reads itself, and the service
// name's default.
func TestEnvironment(t *testing.T) {
	got := map[string]string{}
	for _, v := range Environment("entityflow-test") {
		if _, twice := got[v.Name]; twice {
			t.Errorf("%s listed twice", v.Name)
		}
		got[v.Name] = v.Meaning
	}
	for _, name := range []string{EnvExporter, EnvEndpoint, EnvTracesEndpoint, EnvProtocol, EnvTracesProtocol, "OTEL_SERVICE_NAME"} {
		if got[name] == "" {
			t.Errorf("%s is not listed", name)
		}
	}
	if !strings.Contains(got["OTEL_SERVICE_NAME"], "entityflow-test") {
		t.Errorf("OTEL_SERVICE_NAME: %q names no default", got["OTEL_SERVICE_NAME"])
	}
}
