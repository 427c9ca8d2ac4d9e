package main

import (
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/internal/service/ingress"
)

func TestParseIngestConfig(t *testing.T) {
	on := []string{"-ingest"}
	dir := t.TempDir()
	file := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("test"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, cert, key, creds, nkey := file("ca.pem"), file("cert.pem"), file("key.pem"), file("ingress.creds"), file("ingress.nk")
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(config) bool
		wantErr string // a part of the error; empty: no error
	}{
		{name: "off by default", want: func(c config) bool { return !c.Ingest.Enabled }},
		{name: "defaults", args: on, want: func(c config) bool {
			ic := c.Ingest.Ingress
			return c.Ingest.Enabled && c.Ingest.NATSURL == "nats://127.0.0.1:4222" && len(c.TaskQueues) == 2 &&
				ic.PointsStream == ingress.DefaultPointsStream && ic.PointsPrefix == "rewards" && ic.PointsDurable == "ingest-points" &&
				ic.EventsStream == ingress.DefaultEventsStream && ic.EventsPrefix == "events" && ic.EventsDurable == "ingest-events" &&
				ic.DeadLetterStream == ingress.DefaultDeadLetterStream && ic.MaxAckPending == 1000 && ic.Workers == 64 &&
				ic.MaxPerCustomer == 0 && ic.Retry.MaxDeliveries == 100 && ic.AckWait == 30*time.Second &&
				ic.StreamDuplicates == 0 && len(ic.Tenants) == 0 && ic.Partitions == 8 && ic.PinnedTTL == 10*time.Second
		}},
		{name: "environment", env: map[string]string{
			"INGEST_ENABLED": "true", "NATS_URL": "nats://nats:4222", "INGEST_POINTS_STREAM": "P", "INGEST_POINTS_PREFIX": "acme.rewards",
			"INGEST_MAX_ACK_PENDING": "50", "INGEST_ACK_WAIT": "1m", "INGEST_TENANTS": "t-1, default", "INGEST_EVENTS_STREAM": "off",
			"INGEST_STREAM_DUPLICATES": "10m", "INGEST_PARTITIONS": "3", "INGEST_PIN_TTL": "4s",
		}, want: func(c config) bool {
			ic := c.Ingest.Ingress
			return c.Ingest.Enabled && c.Ingest.NATSURL == "nats://nats:4222" && ic.PointsStream == "P" && ic.PointsPrefix == "acme.rewards" &&
				ic.MaxAckPending == 50 && ic.AckWait == time.Minute && slices.Equal(ic.Tenants, []string{"t-1", "default"}) &&
				ic.EventsStream == ingress.Off && ic.StreamDuplicates == 10*time.Minute && ic.Partitions == 3 && ic.PinnedTTL == 4*time.Second
		}},
		{name: "ingress only", args: []string{"-ingest", "-task-queues", "none"}, want: func(c config) bool {
			return c.Ingest.Enabled && c.TaskQueues == nil
		}},
		{name: "flag over environment", args: []string{"-ingest", "-ingest-max-per-customer", "4", "-ingest-workers", "8"}, env: map[string]string{"INGEST_MAX_PER_CUSTOMER": "32"}, want: func(c config) bool {
			return c.Ingest.Ingress.MaxPerCustomer == 4 && c.Ingest.Ingress.Workers == 8
		}},
		{name: "tenant quotas", args: []string{"-ingest", "-ingest-tenant-rate", "20", "-ingest-tenant-burst", "5", "-ingest-tenant-rates", "t-1=50, t-2=inf"}, want: func(c config) bool {
			ic := c.Ingest.Ingress
			return ic.TenantRate == 20 && ic.TenantBurst == 5 && maps.Equal(ic.TenantRates, map[string]rate.Limit{"t-1": 50, "t-2": rate.Inf})
		}},
		{name: "tenant quotas from the environment", args: on, env: map[string]string{"INGEST_TENANT_RATE": "inf", "INGEST_TENANT_RATES": "t-1=5"}, want: func(c config) bool {
			ic := c.Ingest.Ingress
			return ic.TenantRate == 0 && ic.TenantBurst == 0 && maps.Equal(ic.TenantRates, map[string]rate.Limit{"t-1": 5})
		}},
		{name: "no tenant quota by default", args: on, want: func(c config) bool {
			ic := c.Ingest.Ingress
			return ic.TenantRate == 0 && ic.TenantRates == nil
		}},
		{name: "off by flag over environment", args: []string{"-ingest=false"}, env: map[string]string{"INGEST_ENABLED": "1"}, want: func(c config) bool { return !c.Ingest.Enabled }},
		{name: "max deliveries 0: never give up", args: []string{"-ingest", "-ingest-max-deliveries", "0"}, want: func(c config) bool { return c.Ingest.Ingress.Retry.MaxDeliveries == ingress.NeverGiveUp }},
		{name: "settings unchecked while off", args: []string{"-ingest-workers", "0"}, want: func(c config) bool { return !c.Ingest.Enabled }},
		{name: "nothing to do", args: []string{"-task-queues", "none"}, wantErr: "nothing to do"},
		{name: "bad switch in the environment", env: map[string]string{"INGEST_ENABLED": "yes please"}, wantErr: "INGEST_ENABLED"},
		{name: "bad number in the environment", env: map[string]string{"INGEST_WORKERS": "many"}, wantErr: "INGEST_WORKERS"},
		{name: "bad duration in the environment", env: map[string]string{"INGEST_ACK_WAIT": "30"}, wantErr: "INGEST_ACK_WAIT"},
		{name: "no workers", args: []string{"-ingest", "-ingest-workers", "0"}, wantErr: "-ingest-workers must be at least 1"},
		{name: "negative bound per customer", args: []string{"-ingest", "-ingest-max-per-customer", "-1"}, wantErr: "-ingest-max-per-customer must be 0"},
		{name: "ack wait too short", args: []string{"-ingest", "-ingest-ack-wait", "10ms"}, wantErr: "-ingest-ack-wait"},
		{name: "no partitions", args: []string{"-ingest", "-ingest-partitions", "0"}, wantErr: "-ingest-partitions must be at least 1"},
		{name: "too many partitions", args: []string{"-ingest", "-ingest-partitions", "5000"}, wantErr: "at most 1024"},
		{name: "pin TTL too short", args: []string{"-ingest", "-ingest-pin-ttl", "1s"}, wantErr: "-ingest-pin-ttl"},
		{name: "points prefix under the partitions' root", args: []string{"-ingest", "-ingest-points-prefix", "partition.x"}, wantErr: "first token of the partitions"},
		{name: "negative duplicate window", args: []string{"-ingest", "-ingest-stream-duplicates", "-1s"}, wantErr: "-ingest-stream-duplicates"},
		{name: "both sources off", args: []string{"-ingest", "-ingest-points-stream", "off", "-ingest-events-stream", "off"}, wantErr: "nothing to consume"},
		{name: "one stream for both", args: []string{"-ingest", "-ingest-points-stream", "S", "-ingest-events-stream", "S"}, wantErr: "streams of their own"},
		{name: "overlapping prefixes", args: []string{"-ingest", "-ingest-dead-letter-prefix", "rewards.dead"}, wantErr: "overlap"},
		{name: "wildcard prefix", args: []string{"-ingest", "-ingest-points-prefix", "rewards.*"}, wantErr: "literal subject tokens"},
		{name: "stream name with a dot", args: []string{"-ingest", "-ingest-points-stream", "a.b"}, wantErr: "JetStream name"},
		{name: "negative tenant rate", args: []string{"-ingest", "-ingest-tenant-rate", "-1"}, wantErr: "-ingest-tenant-rate must be 0 or more"},
		{name: "bad tenant rate pair", args: []string{"-ingest", "-ingest-tenant-rates", "t-1:5"}, wantErr: "want tenant=rate"},
		{name: "zero tenant rate", args: []string{"-ingest", "-ingest-tenant-rates", "t-1=0"}, wantErr: "more than 0"},
		{name: "bad tenant in the rates", args: []string{"-ingest", "-ingest-tenant-rates", "-x=5"}, wantErr: "tenant rate of"},
		{name: "negative tenant burst", args: []string{"-ingest", "-ingest-tenant-burst", "-1"}, wantErr: "tenant burst"},
		{name: "bad tenant rate in the environment", env: map[string]string{"INGEST_TENANT_RATE": "fast"}, wantErr: "INGEST_TENANT_RATE"},
		{name: "bad tenant", args: []string{"-ingest", "-ingest-tenants", "t-1,-x"}, wantErr: `served tenant: tenant ID "-x"`},
		{name: "NATS: plain text without credentials by default", args: on, want: func(c config) bool { return c.Ingest.NATS == ingress.Security{} }},
		{name: "NATS: TLS, client certificate and user from the environment", env: map[string]string{
			"INGEST_ENABLED": "true", "NATS_CA": ca, "NATS_CERT": cert, "NATS_KEY": key, "NATS_USER": "ingress", "NATS_PASSWORD": "s3cret",
		}, want: func(c config) bool {
			return c.Ingest.NATS == ingress.Security{CAFile: ca, CertFile: cert, KeyFile: key, User: "ingress", Password: "s3cret"}
		}},
		{name: "NATS: creds file by flag", args: []string{"-ingest", "-nats-ca", ca, "-nats-creds", creds}, want: func(c config) bool {
			return c.Ingest.NATS == ingress.Security{CAFile: ca, CredsFile: creds}
		}},
		{name: "NATS: nkey flag over the environment's", args: []string{"-ingest", "-nats-nkey", nkey}, env: map[string]string{"NATS_NKEY": missing}, want: func(c config) bool {
			return c.Ingest.NATS.NkeyFile == nkey
		}},
		{name: "NATS: token from the environment", args: on, env: map[string]string{"NATS_TOKEN": "t0ken"}, want: func(c config) bool { return c.Ingest.NATS.Token == "t0ken" }},
		{name: "NATS: settings unchecked while off", env: map[string]string{"NATS_CERT": cert}, want: func(c config) bool { return !c.Ingest.Enabled }},
		{name: "NATS: certificate without its key", args: []string{"-ingest", "-nats-cert", cert}, wantErr: "both -nats-cert and -nats-key"},
		{name: "NATS: key without its certificate", args: []string{"-ingest", "-nats-key", key}, wantErr: "both -nats-cert and -nats-key"},
		{name: "NATS: two credential kinds", args: []string{"-ingest", "-nats-creds", creds}, env: map[string]string{"NATS_TOKEN": "t0ken"}, wantErr: "one kind at a time, not creds and token"},
		{name: "NATS: user without password", args: []string{"-ingest", "-nats-user", "ingress"}, wantErr: "both -nats-user and -nats-password"},
		{name: "NATS: password without user", args: on, env: map[string]string{"NATS_PASSWORD": "s3cret"}, wantErr: "both -nats-user and -nats-password"},
		{name: "NATS: a file that is not there", args: []string{"-ingest", "-nats-ca", missing}, wantErr: "-nats-ca: open " + missing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setEnv(t, tt.env)
			c, err := parseConfig(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(c) {
				t.Errorf("config %+v", c)
			}
		})
	}
}
