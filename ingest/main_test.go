package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/ingress"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(config) bool
		wantErr string // a part of the error; empty: no error
	}{
		{name: "defaults", want: func(c config) bool {
			ic := c.ingress
			return c.natsURL == "nats://127.0.0.1:4222" && c.metricsAddr == "127.0.0.1:9091" &&
				ic.PointsStream == ingress.DefaultPointsStream && ic.PointsPrefix == "rewards" && ic.PointsDurable == "ingest-points" &&
				ic.EventsStream == ingress.DefaultEventsStream && ic.EventsPrefix == "events" && ic.EventsDurable == "ingest-events" &&
				ic.DeadLetterStream == ingress.DefaultDeadLetterStream && ic.MaxAckPending == 1000 && ic.Partitions == 64 &&
				ic.MaxPerCustomer == 16 && ic.Retry.MaxDeliveries == 100 && ic.AckWait == 30*time.Second && len(ic.Tenants) == 0
		}},
		{name: "environment", env: map[string]string{
			"NATS_URL": "nats://nats:4222", "INGEST_POINTS_STREAM": "P", "INGEST_POINTS_PREFIX": "acme.rewards",
			"INGEST_MAX_ACK_PENDING": "50", "INGEST_ACK_WAIT": "1m", "INGEST_TENANTS": "t-1, default", "INGEST_EVENTS_STREAM": "off",
		}, want: func(c config) bool {
			ic := c.ingress
			return c.natsURL == "nats://nats:4222" && ic.PointsStream == "P" && ic.PointsPrefix == "acme.rewards" &&
				ic.MaxAckPending == 50 && ic.AckWait == time.Minute && slices.Equal(ic.Tenants, []string{"t-1", "default"}) &&
				ic.EventsStream == ingress.Off
		}},
		{name: "flag over environment", args: []string{"-max-per-customer", "4", "-partitions", "8"}, env: map[string]string{"INGEST_MAX_PER_CUSTOMER": "32"}, want: func(c config) bool {
			return c.ingress.MaxPerCustomer == 4 && c.ingress.Partitions == 8
		}},
		{name: "max deliveries 0: never give up", args: []string{"-max-deliveries", "0"}, want: func(c config) bool { return c.ingress.Retry.MaxDeliveries == 0 }},
		{name: "bad number in the environment", env: map[string]string{"INGEST_PARTITIONS": "many"}, wantErr: "INGEST_PARTITIONS"},
		{name: "bad duration in the environment", env: map[string]string{"INGEST_ACK_WAIT": "30"}, wantErr: "INGEST_ACK_WAIT"},
		{name: "no partitions", args: []string{"-partitions", "0"}, wantErr: "-partitions must be at least 1"},
		{name: "ack wait too short", args: []string{"-ack-wait", "10ms"}, wantErr: "-ack-wait"},
		{name: "both sources off", args: []string{"-points-stream", "off", "-events-stream", "off"}, wantErr: "nothing to consume"},
		{name: "one stream for both", args: []string{"-points-stream", "S", "-events-stream", "S"}, wantErr: "streams of their own"},
		{name: "overlapping prefixes", args: []string{"-dead-letter-prefix", "rewards.dead"}, wantErr: "overlap"},
		{name: "wildcard prefix", args: []string{"-points-prefix", "rewards.*"}, wantErr: "literal subject tokens"},
		{name: "stream name with a dot", args: []string{"-points-stream", "a.b"}, wantErr: "JetStream name"},
		{name: "bad tenant", args: []string{"-tenants", "t-1,-x"}, wantErr: "tenant_id"},
		{name: "arguments", args: []string{"extra"}, wantErr: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			c, err := parseConfig(tt.args, getenv, io.Discard)
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
	if _, err := parseConfig([]string{"-h"}, func(string) string { return "" }, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}
