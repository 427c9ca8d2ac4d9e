package workerprocess

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// Run fails on a configuration it cannot serve before it dials Temporal: the
// address here has no server, so getting as far as dialing would block
// until the test's deadline.
func TestRunFailsBeforeDialing(t *testing.T) {
	short := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 16))
	tests := []struct {
		name    string
		cfg     Config
		keys    string
		wantErr string
	}{
		{name: "payload key too short", cfg: Config{MetricsAddr: MetricsOff}, keys: `{"current": "k1", "keys": {"k1": "` + short + `"}}`, wantErr: "payload keys"},
		{name: "metrics address not listenable", cfg: Config{MetricsAddr: "127.0.0.1:99999"}, wantErr: "metrics endpoint on 127.0.0.1:99999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(payloadcodec.KeysFileEnv, "")
			t.Setenv(payloadcodec.KeysEnv, tt.keys)
			tt.cfg.Address, tt.cfg.StickyCacheSize, tt.cfg.TaskQueues = "127.0.0.1:1", 2000, []string{rewards.RewardsTaskQueue}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := Run(ctx, tt.cfg, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// The start message names the task queues and the deployment version.
func TestStartMessageValues(t *testing.T) {
	versioned := Config{Version: worker.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildID: "v2"}}
	tests := []struct {
		name                 string
		cfg                  Config
		wantQueues, wantVers string
	}{
		{name: "both queues, unversioned", cfg: Config{TaskQueues: []string{"rewards", "activities"}}, wantQueues: "rewards,activities", wantVers: "unversioned"},
		{name: "an ingress only", cfg: Config{}, wantQueues: "none", wantVers: "unversioned"},
		{name: "versioned", cfg: versioned, wantQueues: "none", wantVers: "entityflow:v2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := queuesText(tt.cfg.TaskQueues); got != tt.wantQueues {
				t.Errorf("queues %q, want %q", got, tt.wantQueues)
			}
			if got := versionText(tt.cfg); got != tt.wantVers {
				t.Errorf("version %q, want %q", got, tt.wantVers)
			}
		})
	}
}
