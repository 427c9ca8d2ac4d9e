package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/proxy"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/proto"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/histories"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// keyring returns a codec over fixed test keys: current, and the IDs in
// also (decrypt only). Key "k1" is always the same bytes, and so on.
func keyring(t *testing.T, current string, also ...string) *payloadcodec.Codec {
	t.Helper()
	keys := map[string][]byte{}
	for _, id := range append([]string{current}, also...) {
		keys[id] = bytes.Repeat([]byte(id[len(id)-1:]), payloadcodec.KeySize)
	}
	r, err := payloadcodec.NewKeyring(current, keys)
	if err != nil {
		t.Fatal(err)
	}
	return payloadcodec.New(r)
}

// encryptedWorker runs a rewards worker whose client encrypts with codec,
// sharing c's connection, as a worker program with those keys does.
func encryptedWorker(t *testing.T, c client.Client, codec *payloadcodec.Codec) (client.Client, worker.Worker) {
	t.Helper()
	ec, err := client.NewClientFromExisting(c, client.Options{
		DataConverter: temporalclient.EncryptingConverter(codec),
		Logger:        sdklog.NewStructuredLogger(quietLogger(t)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ec.Close)
	w := rewardsworker.New(ec, "default", rewardsact.LogRecorder{Logger: quietLogger(t)}, worker.Options{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	return ec, w
}

// payloadKeys returns the key ID of every payload in hist (search attributes
// aside, which the server must be able to index), and fails the test on a
// payload that is not encrypted or that shows secret.
func payloadKeys(t *testing.T, hist *historypb.History, secret string) map[string]int {
	t.Helper()
	raw, err := proto.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(secret)) {
		t.Fatalf("the history shows %q in plaintext", secret)
	}
	keys := map[string]int{}
	err = proxy.VisitPayloads(context.Background(), hist, proxy.VisitPayloadsOptions{
		SkipSearchAttributes: true,
		Visitor: func(_ *proxy.VisitPayloadsContext, ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
			for _, p := range ps {
				if enc := string(p.GetMetadata()[converter.MetadataEncoding]); enc != payloadcodec.MetadataEncodingEncrypted {
					return nil, fmt.Errorf("a payload encoded %q, not encrypted: %s", enc, p.GetData())
				}
				keys[string(p.GetMetadata()[payloadcodec.MetadataKeyID])]++
			}
			return ps, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// startInput decrypts the input of the run hist starts with.
func startInput(t *testing.T, hist *historypb.History, codec *payloadcodec.Codec) rewards.RewardsInput {
	t.Helper()
	var in rewards.RewardsInput
	attrs := hist.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
	if err := temporalclient.EncryptingConverter(codec).FromPayloads(attrs.GetInput(), &in); err != nil {
		t.Fatal(err)
	}
	return in
}

// replay replays every run of the entity with dc, as a worker would.
func replay(t *testing.T, workflowID string, runs []histories.Run, dc converter.DataConverter) error {
	t.Helper()
	for _, run := range runs {
		r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{DataConverter: dc})
		if err != nil {
			return fmt.Errorf("a replayer: %w", err)
		}
		rewards.Register(r)
		err = r.ReplayWorkflowHistoryWithOptions(sdklog.NewStructuredLogger(quietLogger(t)), run.History, worker.ReplayWorkflowHistoryOptions{
			OriginalExecution: workflow.Execution{ID: workflowID, RunID: run.RunID},
		})
		if err != nil {
			return fmt.Errorf("run %s: %w", run.RunID, err)
		}
	}
	return nil
}

// TestEncryptedHistoryReplays runs an entity with encrypting clients and
// workers on a real server, through ContinueAsNew and a key rotation done
// the documented way (workers restarted with the new key current and the old
// one kept): every payload in its histories is ciphertext, each names its
// key, the runs replay with the keyring, and programs without the right keys
// fail with errors that say why.
func TestEncryptedHistoryReplays(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const customer = "enc-1"
	const secret = "order-7f3a9c-secret"
	workflowID := rewards.RewardsWorkflowID(customer)
	event := func(i int) rewards.PointEvent {
		return rewards.PointEvent{DedupKey: fmt.Sprintf("enc-e%d", i), Activity: "purchase", Points: int64(i), SourceID: fmt.Sprintf("%s-%d", secret, i)}
	}

	// Before the rotation: key k1. Three events per run, so five events
	// make a ContinueAsNew, whose input the worker encrypts.
	k1 := keyring(t, "k1")
	c1, w1 := encryptedWorker(t, srv.Client(), k1)
	rc1 := newClient(c1, rewards.Options{EventsPerRun: 3})
	for i := 1; i <= 4; i++ {
		if _, err := rc1.ApplyPoints(ctx, customer, event(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := rc1.AddPoints(ctx, customer, event(5)); err != nil {
		t.Fatal(err)
	}
	for st := status(t, ctx, rc1, customer); st.EventCount < 5; st = status(t, ctx, rc1, customer) {
		time.Sleep(50 * time.Millisecond) // the signal is applied by a later workflow task
	}

	// A client without the keys cannot read the entity's answers, and says so.
	plain, err := client.NewClientFromExisting(srv.Client(), client.Options{Logger: sdklog.NewStructuredLogger(quietLogger(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := queryStatus(ctx, plain, workflowID); err == nil || !strings.Contains(err.Error(), payloadcodec.MetadataEncodingEncrypted) {
		t.Fatalf("a client without keys querying the entity: %v, want an error naming %s", err, payloadcodec.MetadataEncodingEncrypted)
	}

	// The rotation: k2 current, k1 kept to decrypt. The workers restart.
	w1.Stop()
	k2 := keyring(t, "k2", "k1")
	c2, w2 := encryptedWorker(t, srv.Client(), k2)
	defer w2.Stop()
	rc2 := newClient(c2, rewards.Options{EventsPerRun: 3})
	for i := 6; i <= 7; i++ {
		if _, err := rc2.ApplyPoints(ctx, customer, event(i)); err != nil {
			t.Fatal(err)
		}
	}
	if st := status(t, ctx, rc2, customer); st.Points != 28 || st.EventCount != 7 {
		t.Fatalf("status %+v, want 28 points from 7 events", st)
	}

	runs, err := histories.Chain(ctx, c2, workflowID)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) < 3 {
		t.Fatalf("%d runs, want at least 3 (ContinueAsNew every 3 events)", len(runs))
	}
	for i, run := range runs {
		keys := payloadKeys(t, run.History, secret)
		t.Logf("run %d: payloads per key %v", i+1, keys)
		if in := startInput(t, run.History, k2); in.CustomerID != customer {
			t.Fatalf("run %d: decrypted input %+v, want customer %s", i+1, in, customer)
		}
	}
	// The first run was written before the rotation, the last one after it.
	if keys := payloadKeys(t, runs[0].History, secret); keys["k2"] != 0 || keys["k1"] == 0 {
		t.Fatalf("the first run's payloads per key %v, want k1 only", keys)
	}
	if keys := payloadKeys(t, runs[len(runs)-1].History, secret); keys["k1"] != 0 || keys["k2"] == 0 {
		t.Fatalf("the last run's payloads per key %v, want k2 only", keys)
	}

	if err := replay(t, workflowID, runs, temporalclient.EncryptingConverter(k2)); err != nil {
		t.Fatalf("replaying with the rotated keyring: %v", err)
	}
	tests := []struct {
		name string
		dc   converter.DataConverter
		want string
	}{
		{name: "without keys", dc: converter.GetDefaultDataConverter(), want: payloadcodec.MetadataEncodingEncrypted},
		{name: "with k1 retired too early", dc: temporalclient.EncryptingConverter(keyring(t, "k2")), want: `"k1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := replay(t, workflowID, runs[:1], tt.dc)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("replaying the first run %s: %v, want an error naming %s", tt.name, err, tt.want)
			}
			t.Logf("replaying the first run %s: %v", tt.name, err)
		})
	}
}

// queryStatus asks the entity its status through c.
func queryStatus(ctx context.Context, c client.Client, workflowID string) error {
	v, err := c.QueryWorkflow(ctx, workflowID, "", rewards.QueryGetStatus)
	if err != nil {
		return err
	}
	var st rewards.Status
	if err := v.Get(&st); err != nil {
		return fmt.Errorf("reading the status: %w", err)
	}
	return errors.New("read an encrypted status without the keys")
}
