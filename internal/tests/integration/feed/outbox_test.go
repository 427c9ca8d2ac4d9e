package feed_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// An outbox that cannot drain (NATS down) becomes visible: the entity's
// status shows its length and feed_seq, `starter feed stuck`'s listing
// (RewardsOutboxSince on the real visibility store) finds it, and the
// worker's metrics count the fallback to the activity. An operator
// discards its first change; the record stays in the status, and once NATS
// is back the rest is published, the stream skipping the discarded seq, and
// the entity leaves the listing.
func TestFeedStuckOutboxListedAndDiscarded(t *testing.T) {
	e := newEnv(t, 100)
	addr := e.nats.Addr
	e.nats.Stop()
	metricsAddr := freeAddr(t)
	e.startWorker([]string{"-metrics-addr", metricsAddr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const customer = "feed-stuck"
	workflowID := rewards.RewardsWorkflowID(customer)
	if _, err := e.rc.ApplyPoints(ctx, customer, rewards.PointEvent{DedupKey: "k-1", Activity: "purchase", Points: 900}); err != nil {
		t.Fatal(err)
	}
	// enrolled, balance_changed, tier_changed (basic -> gold)
	listed := waitListed(t, ctx, e, workflowID, true)
	if listed.Status == nil || listed.Status.OutboxLen != 3 || listed.Status.FeedSeq != 3 || listed.Status.OutboxOldestAt.IsZero() {
		t.Fatalf("listed %+v: want the status with 3 changes in the outbox", listed)
	}
	if listed.Since.IsZero() || !listed.Since.Equal(listed.Status.OutboxOldestAt) {
		t.Errorf("listed since %v, want the oldest change's time %v", listed.Since, listed.Status.OutboxOldestAt)
	}
	fallbacks := metricValue(t, metricsAddr, `changefeed_publications_total{mode="activity",result="error"}`)
	depth := metricValue(t, metricsAddr, `changefeed_outbox_depth_count`)
	if fallbacks < 1 || depth < 1 {
		t.Errorf("metrics: %v failed activity publications, %v depth observations; want both above zero", fallbacks, depth)
	}

	res, err := e.rc.DiscardOutbox(ctx, customer, rewards.DiscardOutbox{Reason: "integration test", ThroughSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rec := res.Record; rec.FirstSeq != 1 || rec.LastSeq != 1 || rec.Count != 1 || len(res.Discarded) != 1 || res.Discarded[0].Kind != rewards.ChangeEnrolled {
		t.Fatalf("discard answered %+v: want the enrolled change", res)
	}
	if _, err := e.rc.DiscardOutbox(ctx, customer, rewards.DiscardOutbox{Reason: ""}); err == nil {
		t.Fatal("a discard without a reason was accepted")
	}
	e.startNATS(addr)
	var st rewards.Status
	for {
		if st, err = e.rc.Status(ctx, customer); err != nil {
			t.Fatal(err)
		}
		if st.OutboxLen == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the outbox never drained: %+v", st)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(st.FeedDiscards) != 1 || st.FeedDiscards[0] != res.Record {
		t.Fatalf("status discards %+v, want %+v", st.FeedDiscards, res.Record)
	}
	waitListed(t, ctx, e, workflowID, false)
	var seqs []int64
	for _, m := range e.readStream(ctx) {
		seqs = append(seqs, m.change.Seq)
	}
	if fmt.Sprint(seqs) != "[2 3]" {
		t.Fatalf("stream holds seqs %v, want [2 3]: the discarded change left out, the rest in order", seqs)
	}
	recordIfAsked(t, e.tc, customer, "discard")
}

// waitListed waits until the stuck-outbox listing shows workflowID (want)
// or no longer shows it, and returns its entry.
func waitListed(t *testing.T, ctx context.Context, e *env, workflowID string, want bool) rewardsclient.StuckOutbox {
	t.Helper()
	for {
		stuck, err := rewardsclient.ListStuckOutboxes(ctx, e.tc, time.Now().Add(time.Minute), 100)
		if err != nil {
			t.Fatal(err)
		}
		found := rewardsclient.StuckOutbox{}
		for _, s := range stuck {
			if s.WorkflowID == workflowID {
				found = s
			}
		}
		if (found.WorkflowID != "") == want {
			return found
		}
		if ctx.Err() != nil {
			t.Fatalf("%s listed as stuck: %v, want %v", workflowID, !want, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// metricValue reads one series from the worker's /metrics (0 when absent).
func metricValue(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
