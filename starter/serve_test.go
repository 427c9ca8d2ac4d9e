package main

import (
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/entityflow/entityflow/internal/infra/flagenv"
	"github.com/entityflow/entityflow/internal/testkit/tlstest"
)

// The TLS, codec and payload key settings are checked before serve connects
// to anything.
func TestServeSecurityFlagErrors(t *testing.T) {
	dir := t.TempDir()
	a := tlstest.NewPair(t, 1)
	a.Write(t, dir)
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "-tls-cert alone", args: []string{"-tls-cert", a.CertFile}, want: "go together"},
		{name: "HTTP_TLS_KEY alone", env: map[string]string{"HTTP_TLS_KEY": a.KeyFile}, want: "go together"},
		{name: "missing certificate", args: []string{"-tls-cert", missing, "-tls-key", a.KeyFile}, want: "no such file"},
		{name: "environment pair, flag key of another file", env: map[string]string{"HTTP_TLS_CERT": a.CertFile, "HTTP_TLS_KEY": a.KeyFile}, args: []string{"-tls-key", a.CertFile}, want: "TLS certificate"},
		{name: "codec origin with a path", args: []string{"-codec-cors-origin", "http://127.0.0.1:8233/namespaces"}, want: "want scheme://host[:port]"},
		{name: "CODEC_CORS_ORIGIN not a URL", env: map[string]string{"CODEC_CORS_ORIGIN": "127.0.0.1:8233"}, want: "want scheme://host[:port]"},
		{name: "payload key of 16 bytes", env: map[string]string{"TEMPORAL_PAYLOAD_KEYS": `{"current": "k1", "keys": {"k1": "AAAAAAAAAAAAAAAAAAAAAA=="}}`}, want: "loading Temporal payload keys: TEMPORAL_PAYLOAD_KEYS: payload keys: key \"k1\" is 16 bytes, want 32"},
		{name: "payload keys file missing", env: map[string]string{"TEMPORAL_PAYLOAD_KEYS_FILE": missing}, want: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, name := range []string{"HTTP_TLS_CERT", "HTTP_TLS_KEY", "CODEC_CORS_ORIGIN", "TEMPORAL_PAYLOAD_KEYS", "TEMPORAL_PAYLOAD_KEYS_FILE"} {
				t.Setenv(name, tt.env[name])
			}
			_, _, err := runStarter(t, append([]string{"serve", "-address", unreachable}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// serve's help ends with the variables it reads that no flag stands for:
// the Temporal SDK's, the payload keys, OpenTelemetry's.
func TestServeHelpListsTheVariablesWithoutAFlag(t *testing.T) {
	_, stderr, err := runStarter(t, "serve", "-h")
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	flags, section, found := strings.Cut(stderr, "\n"+flagenv.UnflaggedHeading+"\n")
	if !found {
		t.Fatalf("serve -h has no %q:\n%s", flagenv.UnflaggedHeading, stderr)
	}
	if !strings.Contains(flags, "(env HTTP_ADDR)") {
		t.Errorf("the flags before the section:\n%s", flags)
	}
	unflagged := map[string]bool{}
	for line := range strings.Lines(section) {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		unflagged[name] = true
	}
	for _, env := range []string{"TEMPORAL_API_KEY", "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_PAYLOAD_KEYS_FILE", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"} {
		if !unflagged[env] {
			t.Errorf("the variables without a flag leave out %s:\n%s", env, section)
		}
	}
	for _, vars := range []flagenv.Vars{environment[""], environment["serve"]} {
		for _, env := range vars {
			if unflagged[env] {
				t.Errorf("%s has a flag and is listed among the variables without one", env)
			}
		}
	}
	if !strings.Contains(section, "(default entityflow-api)") {
		t.Errorf("OTEL_SERVICE_NAME does not say the API's service name:\n%s", section)
	}
}
