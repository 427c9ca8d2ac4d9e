package ingest_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/deadletters"
	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// testName is a producer's header of the dead-letter test's messages: it
// names each, and a replay must carry it on.
const testName = "Test-Name"

// publishNamed stores one message with the header Test-Name: name, and a
// Nats-Msg-Id when msgID is set.
func (e *env) publishNamed(subject, name string, body []byte, msgID string) {
	e.t.Helper()
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(testName, name)
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	if _, err := e.js.PublishMsg(background(e.t), m); err != nil {
		e.t.Fatalf("publishing %s on %s: %v", name, subject, err)
	}
}

// outcomes names each result's message (its Test-Name) with its outcome.
func outcomes(rep deadletters.Report) map[string]deadletters.Outcome {
	out := map[string]deadletters.Outcome{}
	for _, r := range rep.Results {
		out[r.Letter.Header.Get(testName)] = r.Outcome
	}
	return out
}

// names returns the Test-Names of letters, sorted.
func names(letters []deadletters.Letter) []string {
	var out []string
	for _, l := range letters {
		out = append(out, l.Header.Get(testName))
	}
	sort.Strings(out)
	return out
}

// One dead letter of every reason the ingress produces but rejected (a
// refusal by Temporal that input the ingress checks first cannot provoke),
// retries-exhausted by a closed platform database: list with each filter;
// a dry run sends nothing; once the causes are fixed (a tenant served, a
// customer enrolled again, a balance topped up, the database back) a replay
// applies those, the others are still failing; a second replay is a
// duplicate for the applied ones and purges their letters.
func TestDeadLetterListAndReplay(t *testing.T) {
	e := newEnv(t)
	ctx := background(t)
	e.cfg.Tenants = []string{"default", "t-1"}
	// A duplicate window longer than the test: the second replay's copies
	// are dropped by JetStream as duplicates of the first's.
	e.cfg.StreamDuplicates = 5 * time.Minute
	e.cfg.Retry = ingress.RetryPolicy{Base: 50 * time.Millisecond, Max: 100 * time.Millisecond, MaxDeliveries: 2}

	// The platform on a database that is closed: envelopes to it fail for
	// an unexplained reason until their attempts run out.
	broken, err := store.Open(ctx, dbtest.SQLite(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	broken.Close()
	good := e.platform
	e.platform = &platform.Service{Store: broken, Temporal: e.c, Logger: quietLogger(t)}

	def := e.rewards.For("default")
	if _, err := def.ApplyPoints(ctx, "gone", rewards.PointEvent{DedupKey: "g-1", Points: 5}); err != nil {
		t.Fatal(err)
	}
	if err := def.Unenroll(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.GetWorkflow(ctx, rewards.RewardsWorkflowID("gone"), "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := def.ApplyPoints(ctx, "c-2", rewards.PointEvent{DedupKey: "k-0", Points: 3}); err != nil {
		t.Fatal(err)
	}

	stop := e.startOn(e.js, prometheus.NewRegistry())
	pointsAt := func(tenant, cust string) string { return ingress.PointsSubject(e.cfg.PointsPrefix, tenant, cust) }
	eventsOf := func(tenant string) string { return ingress.EventsSubject(e.cfg.EventsPrefix, tenant) }
	envelope := func(id, tenant string) []byte {
		return mustJSON(t, contracts.EventEnvelope{EventID: id, EventType: "order.created", Source: "shop", TenantID: tenant,
			OccurredAt: time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)})
	}
	reasons := map[string]string{ // Test-Name -> reason
		"p-json": ingress.ReasonInvalidPayload, "p-subject": ingress.ReasonInvalidSubject,
		"p-tenant": ingress.ReasonUnknownTenant, "p-reused": ingress.ReasonKeyReused,
		"p-overdraw": ingress.ReasonInvalidEvent, "p-gone": ingress.ReasonNotEnrolled,
		"e-invalid": ingress.ReasonInvalidPayload, "e-mismatch": ingress.ReasonTenantMismatch,
		"e-tenant": ingress.ReasonUnknownTenant, "e-broken": ingress.ReasonRetriesExhausted,
	}
	e.publishNamed(pointsAt("default", "c-1"), "p-json", []byte(`{"points": 5`), "p-json")
	// A subject of no stream is refused at publish; one a stream takes whose
	// customer token no ID has (a lower-case escape) is dead-lettered.
	e.publishNamed(e.cfg.PointsPrefix+".default.c%2e1.points", "p-subject", []byte(`{"points": 5}`), "p-subject")
	e.publishNamed(pointsAt("t-2", "c-1"), "p-tenant", []byte(`{"dedup_key": "t2-1", "points": 5}`), "")
	e.publishNamed(pointsAt("default", "c-2"), "p-reused", []byte(`{"dedup_key": "k-0", "points": 99}`), "p-reused")
	e.publishNamed(pointsAt("default", "c-1"), "p-overdraw", []byte(`{"dedup_key": "overdraw", "points": -5}`), "p-overdraw")
	e.publishNamed(pointsAt("default", "gone"), "p-gone", []byte(`{"dedup_key": "g-2", "points": 5}`), "p-gone")
	e.publishNamed(eventsOf("t-1"), "e-invalid", []byte(`{"event_type": "order.created", "tenant_id": "t-1"}`), "e-invalid")
	e.publishNamed(eventsOf("t-1"), "e-mismatch", envelope("evt-m", "t-2"), "e-mismatch")
	e.publishNamed(eventsOf("t-2"), "e-tenant", envelope("evt-t2", "t-2"), "")
	e.publishNamed(eventsOf("t-1"), "e-broken", envelope("evt-broken", "t-1"), "e-broken")

	bus := e.deadLetterBus()
	list := func(reason, subject, since string) []deadletters.Letter {
		t.Helper()
		f, err := deadletters.ParseFilter(reason, subject, since, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		letters, err := bus.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return letters
	}
	waitFor(t, "a dead letter of each message", 2*time.Minute, func() (bool, error) {
		return len(list("", "", "")) >= len(reasons), nil
	})
	stop()

	all := list("", "", "")
	for _, l := range all {
		n := l.Header.Get(testName)
		if l.Reason != reasons[n] || l.Error == "" || l.Stream == "" || l.StreamSequence == 0 {
			t.Errorf("%s: reason %q (want %q), error %q, from %s:%d", n, l.Reason, reasons[n], l.Error, l.Stream, l.StreamSequence)
		}
	}
	if len(all) != len(reasons) {
		t.Fatalf("%d dead letters, want %d: %v", len(all), len(reasons), names(all))
	}

	// The filters.
	for _, tc := range []struct {
		name, reason, subject string
		want                  []string
	}{
		{"a reason", ingress.ReasonNotEnrolled, "", []string{"p-gone"}},
		{"two reasons", ingress.ReasonUnknownTenant + "," + ingress.ReasonTenantMismatch, "", []string{"e-mismatch", "e-tenant", "p-tenant"}},
		{"a subject", "", pointsAt("default", "gone"), []string{"p-gone"}},
		{"a subject with '*'", "", e.cfg.PointsPrefix + ".*.c-1.points", []string{"p-json", "p-overdraw", "p-tenant"}},
		{"a subject with '>'", "", e.cfg.EventsPrefix + ".>", []string{"e-broken", "e-invalid", "e-mismatch", "e-tenant"}},
		{"a reason and a subject", ingress.ReasonInvalidPayload, e.cfg.EventsPrefix + ".>", []string{"e-invalid"}},
	} {
		if got := names(list(tc.reason, tc.subject, "")); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	since := all[len(all)/2].Time
	var want []string
	for _, l := range all {
		if !l.Time.Before(since) {
			want = append(want, l.Header.Get(testName))
		}
	}
	sort.Strings(want)
	if got := names(list("", "", since.Format(time.RFC3339Nano))); !slices.Equal(got, want) {
		t.Errorf("since %v: %v, want %v", since, got, want)
	}
	if got := list("", "", time.Now().Add(time.Hour).Format(time.RFC3339)); len(got) != 0 {
		t.Errorf("since an hour from now: %v", names(got))
	}
	if got := list("", "", "1h"); len(got) != len(all) {
		t.Errorf("since 1h: %d letters, want %d", len(got), len(all))
	}

	// A dry run sends nothing.
	counts := func() (n [4]uint64) {
		for i, s := range []string{e.cfg.PointsStream, e.cfg.EventsStream, e.cfg.DeadLetterStream, e.cfg.ReplayStream} {
			st, err := e.js.Stream(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n[i] = info.State.LastSeq
		}
		return n
	}
	before := counts()
	dry, err := bus.Replay(ctx, all, deadletters.ReplayOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if after := counts(); after != before || dry.Dry != len(all) || dry.Failed() {
		t.Errorf("dry run: streams' last sequences %v -> %v, report %+v", before, after, dry)
	}
	for _, r := range dry.Results {
		if r.Message.Header.Get(testName) == "" || r.Message.Header.Get(nats.MsgIdHdr) != r.MsgID ||
			r.Message.Header.Get(ingress.HeaderDedupKey) != r.Letter.ReplayKey() ||
			slices.ContainsFunc(mapsKeys(r.Message.Header), func(k string) bool {
				return strings.HasPrefix(k, "Ingest-") && k != ingress.HeaderDedupKey
			}) {
			t.Errorf("%s would be sent with headers %v", r.Letter.Header.Get(testName), r.Message.Header)
		}
	}

	// The fixes: the tenant served, the customer enrolled again, a balance
	// for the redemption, the database back.
	if _, err := def.Enroll(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := def.ApplyPoints(ctx, "c-1", rewards.PointEvent{DedupKey: "top-up", Points: 10}); err != nil {
		t.Fatal(err)
	}
	e.cfg.Tenants = append(e.cfg.Tenants, "t-2")
	e.platform = good
	e.start(prometheus.NewRegistry())

	rep, err := bus.Replay(ctx, all, deadletters.ReplayOptions{Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes := map[string]deadletters.Outcome{
		"p-tenant": deadletters.Applied, "p-overdraw": deadletters.Applied, "p-gone": deadletters.Applied,
		"e-tenant": deadletters.Applied, "e-broken": deadletters.Applied,
		"p-json": deadletters.StillFailing, "p-subject": deadletters.StillFailing, "p-reused": deadletters.StillFailing,
		"e-invalid": deadletters.StillFailing, "e-mismatch": deadletters.StillFailing,
	}
	checkOutcomes := func(what string, rep deadletters.Report, want map[string]deadletters.Outcome) {
		t.Helper()
		for n, o := range outcomes(rep) {
			if o != want[n] {
				t.Errorf("%s: %s %s, want %s (%+v)", what, n, o, want[n], rep.Results)
			}
		}
		if !rep.Failed() {
			t.Errorf("%s: %+v not failed, though some are still failing", what, rep)
		}
	}
	checkOutcomes("replay", rep, wantOutcomes)
	if rep.Applied != 5 || rep.StillFailing != 5 {
		t.Errorf("replay: %d applied, %d still failing; want 5 and 5", rep.Applied, rep.StillFailing)
	}
	for _, tc := range []struct {
		tenant, customer string
		points           int64
	}{{"default", "gone", 5}, {"default", "c-1", 5}, {"t-2", "c-1", 5}, {"default", "c-2", 3}} {
		st, err := e.rewards.For(tc.tenant).Status(ctx, tc.customer)
		if err != nil {
			t.Fatal(err)
		}
		if st.Points != tc.points {
			t.Errorf("%s/%s: %d points after the replay, want %d", tc.tenant, tc.customer, st.Points, tc.points)
		}
	}

	// Again, with -purge: the applied ones are duplicates now, and their
	// letters go; the still failing ones stay.
	rep, err = bus.Replay(ctx, all, deadletters.ReplayOptions{Wait: time.Minute, Purge: true})
	if err != nil {
		t.Fatal(err)
	}
	for n, o := range wantOutcomes {
		if o == deadletters.Applied {
			wantOutcomes[n] = deadletters.Duplicate
		}
	}
	checkOutcomes("second replay", rep, wantOutcomes)
	left := map[string]int{}
	for _, l := range list("", "", "") {
		left[l.Header.Get(testName)]++
	}
	for n, o := range wantOutcomes {
		switch {
		case o == deadletters.Duplicate && left[n] != 0:
			t.Errorf("%s: %d letters left after a purge", n, left[n])
		case o == deadletters.StillFailing && left[n] == 0:
			t.Errorf("%s: its letter is gone, though it still fails", n)
		}
	}
	t.Logf("letters left: %v", fmt.Sprint(left))
}

// deadLetterBus is the test's dead letters as starter deadletters reads
// them.
func (e *env) deadLetterBus() deadletters.Bus {
	return deadletters.Bus{JS: e.js, Stream: e.cfg.DeadLetterStream, Prefix: e.cfg.DeadLetterPrefix,
		ReplayStream: e.cfg.ReplayStream, ReplayPrefix: e.cfg.ReplayPrefix,
		PointsDurable: e.cfg.PointsDurable, EventsDurable: e.cfg.EventsDurable}
}

// mapsKeys returns the keys of h.
func mapsKeys(h nats.Header) []string {
	var out []string
	for k := range h {
		out = append(out, k)
	}
	return out
}
