package temporalclient

import (
	"context"
	"encoding/base64"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
	"github.com/entityflow/entityflow/internal/testkit/tlstest"
)

// Each variable of Environment changes what Options builds, and every
// variable here is in Environment: the list names what the programs read
// beside their flags, no more and no less.
func TestEnvironmentIsRead(t *testing.T) {
	dir := t.TempDir()
	pair := tlstest.NewPair(t, 1)
	pair.Write(t, dir)
	profiles := filepath.Join(dir, "temporal.toml")
	if err := os.WriteFile(profiles, []byte("[profile.default]\naddress = \"default.example:7233\"\n[profile.other]\naddress = \"other.example:7233\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := base64.StdEncoding.EncodeToString(make([]byte, payloadcodec.KeySize))
	keys := `{"current": "k1", "keys": {"k1": "` + key + `"}}`
	keysFile := filepath.Join(dir, "keys.json")
	if err := os.WriteFile(keysFile, []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsOn := func(o client.Options) bool { return o.ConnectionOptions.TLS != nil }
	oneCert := func(o client.Options) bool { return tlsOn(o) && len(o.ConnectionOptions.TLS.Certificates) == 1 }
	roots := func(o client.Options) bool { return tlsOn(o) && o.ConnectionOptions.TLS.RootCAs != nil }
	encrypting := func(o client.Options) bool {
		return o.DataConverter != nil && o.DataConverter != converter.GetDefaultDataConverter()
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    func(client.Options) bool
		wantErr string
	}{
		{name: "TEMPORAL_API_KEY", env: map[string]string{"TEMPORAL_API_KEY": "k"}, want: func(o client.Options) bool { return o.Credentials != nil && tlsOn(o) }},
		{name: "TEMPORAL_TLS", env: map[string]string{"TEMPORAL_TLS": "true"}, want: tlsOn},
		{name: "TEMPORAL_TLS=false beside an API key", env: map[string]string{"TEMPORAL_TLS": "false", "TEMPORAL_API_KEY": "k"}, want: func(o client.Options) bool { return !tlsOn(o) }},
		{name: "client certificate files", env: map[string]string{"TEMPORAL_TLS_CLIENT_CERT_PATH": pair.CertFile, "TEMPORAL_TLS_CLIENT_KEY_PATH": pair.KeyFile}, want: oneCert},
		{name: "client certificate data", env: map[string]string{"TEMPORAL_TLS_CLIENT_CERT_DATA": string(pair.CertPEM), "TEMPORAL_TLS_CLIENT_KEY_DATA": string(pair.KeyPEM)}, want: oneCert},
		{name: "CA file", env: map[string]string{"TEMPORAL_TLS_SERVER_CA_CERT_PATH": pair.CertFile}, want: roots},
		// envconfig v0.1.0 refuses the data without a path (its check is
		// the wrong way round), as Environment says; with both it reads the
		// data.
		{name: "CA data alone", env: map[string]string{"TEMPORAL_TLS_SERVER_CA_CERT_DATA": string(pair.CertPEM)}, wantErr: "cannot have server CA cert path with data"},
		{name: "CA data beside a path", env: map[string]string{"TEMPORAL_TLS_SERVER_CA_CERT_DATA": string(pair.CertPEM), "TEMPORAL_TLS_SERVER_CA_CERT_PATH": filepath.Join(dir, "missing.pem")}, want: roots},
		{name: "server name", env: map[string]string{"TEMPORAL_TLS_SERVER_NAME": "temporal.internal"}, want: func(o client.Options) bool {
			return tlsOn(o) && o.ConnectionOptions.TLS.ServerName == "temporal.internal"
		}},
		{name: "no host verification", env: map[string]string{"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "true"}, want: func(o client.Options) bool {
			return tlsOn(o) && o.ConnectionOptions.TLS.InsecureSkipVerify
		}},
		{name: "gRPC headers", env: map[string]string{"TEMPORAL_GRPC_META_X_TEAM": "a"}, want: func(o client.Options) bool {
			if o.HeadersProvider == nil {
				return false
			}
			h, err := o.HeadersProvider.GetHeaders(context.Background())
			return err == nil && h["x-team"] == "a"
		}},
		{name: "a profile of a config file", env: map[string]string{"TEMPORAL_CONFIG_FILE": profiles, "TEMPORAL_PROFILE": "other"}, want: func(o client.Options) bool {
			return o.HostPort == "other.example:7233"
		}},
		{name: "payload keys file", env: map[string]string{payloadcodec.KeysFileEnv: keysFile}, want: encrypting},
		{name: "payload keys document", env: map[string]string{payloadcodec.KeysEnv: keys}, want: encrypting},
	}
	listed := map[string]bool{}
	for _, v := range Environment {
		listed[v.Name] = true
	}
	read := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, kv := range os.Environ() {
				if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "TEMPORAL_") {
					unset(t, name)
				}
			}
			for name, value := range tt.env {
				t.Setenv(name, value)
				if strings.HasPrefix(name, "TEMPORAL_GRPC_META_") {
					name = "TEMPORAL_GRPC_META_*"
				}
				if !listed[name] {
					t.Errorf("%s changes the options and is not in Environment", name)
				}
				read[name] = true
			}
			opts, err := Options("", "", nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(opts) {
				t.Errorf("options %+v", opts)
			}
		})
	}
	for _, name := range slices.Sorted(maps.Keys(listed)) {
		if !read[name] {
			t.Errorf("Environment names %s, which no case here shows read", name)
		}
	}
}

// unset removes the variable name for the test, restoring it after.
func unset(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "")
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}
