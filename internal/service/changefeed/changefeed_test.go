package changefeed_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/infra/subjecttoken"
	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/schematest"
	rewardswf "github.com/entityflow/entityflow/workflows/rewards"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	return schematest.Compile(t, contracts.RewardsChangeSchemaID, contracts.RewardsChangeSchema())
}

func validate(sch *jsonschema.Schema, data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

var at = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

func change(kind rewardswf.ChangeKind, fill func(*rewardswf.Change)) rewardswf.Change {
	c := rewardswf.Change{Seq: 1, Kind: kind, TenantID: "default", CustomerID: "c.1", WorkflowID: "rewards-c.1", EntityRunID: "0f8e5c3a-1b2c-4d5e-8f90-123456789abc",
		At: at, Cause: rewardswf.Cause{Type: rewardswf.CauseEvent, DedupKey: "k-1"}, Balance: 600}
	if fill != nil {
		fill(&c)
	}
	return c
}

// Every kind of change the entity makes validates against the published
// schema; a change breaking a rule of it does not.
func TestChangesValidateAgainstTheSchema(t *testing.T) {
	sch := compileSchema(t)
	for _, tc := range []struct {
		name  string
		c     rewardswf.Change
		valid bool
	}{
		{"enrolled", change(rewardswf.ChangeEnrolled, func(c *rewardswf.Change) { c.Cause, c.Balance = rewardswf.Cause{Type: rewardswf.CauseEnroll}, 0 }), true},
		{"unenrolled", change(rewardswf.ChangeUnenrolled, func(c *rewardswf.Change) { c.Cause = rewardswf.Cause{Type: rewardswf.CauseUnenroll} }), true},
		{"tier changed", change(rewardswf.ChangeTierChanged, func(c *rewardswf.Change) { c.From, c.To = rewardswf.TierBasic, rewardswf.TierGold }), true},
		{"balance changed", change(rewardswf.ChangeBalanceChanged, func(c *rewardswf.Change) { c.Delta = -50 }), true},
		{"inactivity reset", change(rewardswf.ChangeBalanceChanged, func(c *rewardswf.Change) {
			c.Delta, c.Balance, c.Cause = -600, 0, rewardswf.Cause{Type: rewardswf.CauseInactivity}
		}), true},
		{"tier change without tiers", change(rewardswf.ChangeTierChanged, nil), false},
		{"balance change without delta", change(rewardswf.ChangeBalanceChanged, nil), false},
		{"enrolled with a delta", change(rewardswf.ChangeEnrolled, func(c *rewardswf.Change) { c.Delta = 5 }), false},
		{"seq 0", change(rewardswf.ChangeEnrolled, func(c *rewardswf.Change) { c.Seq = 0 }), false},
		{"unknown kind", change("points_expired", nil), false},
		{"unknown cause", change(rewardswf.ChangeEnrolled, func(c *rewardswf.Change) { c.Cause.Type = "magic" }), false},
		{"no tenant", change(rewardswf.ChangeEnrolled, func(c *rewardswf.Change) { c.TenantID = "" }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := json.Marshal(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate(sch, data); (err == nil) != tc.valid {
				t.Fatalf("%s: validation error %v, want valid %v", data, err, tc.valid)
			}
		})
	}
}

func TestOverlaps(t *testing.T) {
	for _, tc := range []struct {
		feed, points string
		want         bool
	}{
		{"rewards.changes", "rewards", true},
		{"changes.rewards", "rewards", false},
		{"rewards", "rewards.x", true},
		{"rewardsx", "rewards", false},
		{"rewards.changes", "rewards.changes", true},
	} {
		if got := changefeed.Overlaps(tc.feed, tc.points); got != tc.want {
			t.Errorf("Overlaps(%q, %q) = %v", tc.feed, tc.points, got)
		}
	}
}

func TestSubject(t *testing.T) {
	for _, tc := range []struct {
		tenant, customer, want string
	}{
		// IDs without a dot keep the subjects of the releases before.
		{"", "c-1", "changes.rewards.default.c-1"},
		{"default", "c-1", "changes.rewards.default.c-1"},
		{"t-1", "user:42@shop_1", "changes.rewards.t-1.user:42@shop_1"},
		// Each ID is one token: its dots are written %2E.
		{"", "c.1", "changes.rewards.default.c%2E1"},
		{"acme.eu", "c1", "changes.rewards.acme%2Eeu.c1"},
		{"acme", "eu.c1", "changes.rewards.acme.eu%2Ec1"},
		{"", "a.", "changes.rewards.default.a%2E"},
		{"", ".a", "changes.rewards.default.%2Ea"},
		{"t-1", "a..b", "changes.rewards.t-1.a%2E%2Eb"},
	} {
		if got := changefeed.Subject("changes.rewards", tc.tenant, tc.customer); got != tc.want {
			t.Errorf("Subject(%q, %q) = %q, want %q", tc.tenant, tc.customer, got, tc.want)
		}
	}
}

// Pairs of tenant and customer that shared a subject before each ID became
// one token (a dotted tenant against a dotted customer; a customer ID whose
// dots were written as underscores against one with underscores) get
// subjects of their own, of exactly four tokens, whose tokens give the IDs
// back.
func TestSubjectKeepsIDsApart(t *testing.T) {
	type id struct{ tenant, customer string }
	for _, pair := range [][2]id{
		{{"acme.eu", "c1"}, {"acme", "eu.c1"}},
		{{"a.b", "c.d"}, {"a", "b.c.d"}},
		{{"t-1", "a."}, {"t-1", "a_"}},
		{{"t-1", "a..b"}, {"t-1", "a__b"}},
	} {
		seen := map[string]id{}
		for _, x := range pair {
			s := changefeed.Subject(changefeed.DefaultPrefix, x.tenant, x.customer)
			if other, ok := seen[s]; ok {
				t.Errorf("%+v and %+v share %s", x, other, s)
			}
			seen[s] = x
			tokens := strings.Split(s, ".")
			if len(tokens) != 4 {
				t.Errorf("%+v: subject %s has %d tokens, want 4", x, s, len(tokens))
				continue
			}
			tenantID, err1 := subjecttoken.Decode(tokens[2])
			customer, err2 := subjecttoken.Decode(tokens[3])
			if err1 != nil || err2 != nil || tenantID != x.tenant || customer != x.customer {
				t.Errorf("%+v: subject %s decodes to %q, %q (%v, %v)", x, s, tenantID, customer, err1, err2)
			}
		}
	}
}

// Against a real NATS server: the stream is created with the duplicate
// window, a batch published twice (a retried activity) is stored once, in
// order, under {workflow ID}:{entity run ID}:{seq}, and EnsureStream widens an existing
// stream's shorter window.
func TestPublishStoresEachChangeOnceInOrder(t *testing.T) {
	srv := natsserver.ForTest(t)
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: changefeed.DefaultStream, Subjects: []string{"other.>"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := changefeed.EnsureStream(ctx, js, changefeed.Config{Mode: rewardswf.FeedAll}); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, changefeed.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.Duplicates != changefeed.DuplicateWindow || len(cfg.Subjects) != 2 {
		t.Fatalf("stream config after EnsureStream: subjects %v, duplicates %v", cfg.Subjects, cfg.Duplicates)
	}
	p := &changefeed.Publisher{JS: js, Stream: changefeed.DefaultStream, Prefix: changefeed.DefaultPrefix}
	var batch []rewardswf.Change
	for i := range 5 {
		batch = append(batch, change(rewardswf.ChangeBalanceChanged, func(c *rewardswf.Change) { c.Seq, c.Delta = int64(i+1), 10 }))
	}
	for _, b := range [][]rewardswf.Change{batch[:3], batch, batch[2:]} {
		if err := p.Publish(ctx, b, true); err != nil {
			t.Fatal(err)
		}
	}
	sch := compileSchema(t)
	for seq := uint64(1); seq <= 6; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if seq == 6 {
			if err == nil {
				t.Fatalf("a sixth message: %s", m.Data)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var c rewardswf.Change
		if err := json.Unmarshal(m.Data, &c); err != nil {
			t.Fatal(err)
		}
		if c.Seq != int64(seq) || m.Header.Get(jetstream.MsgIDHeader) != c.MsgID() || m.Subject != "changes.rewards.default.c%2E1" {
			t.Fatalf("message %d: %s %v %s", seq, m.Subject, m.Header, m.Data)
		}
		if err := validate(sch, m.Data); err != nil {
			t.Fatalf("message %d does not validate: %v", seq, err)
		}
	}
}

// Against a real NATS server whose stream's duplicate window has passed: a
// publication cut off by an outage and sent again after the window still
// stores each change once (Publish skips what the stream holds), and the
// changes of another entity under the same subject (a customer enrolled
// again: a new entity run) are all stored.
func TestPublishAfterTheDuplicateWindowStoresEachChangeOnce(t *testing.T) {
	srv := natsserver.ForTest(t)
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const window = 100 * time.Millisecond
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: changefeed.DefaultStream, Subjects: []string{changefeed.DefaultPrefix + ".>"}, Duplicates: window})
	if err != nil {
		t.Fatal(err)
	}
	p := &changefeed.Publisher{JS: js, Stream: changefeed.DefaultStream, Prefix: changefeed.DefaultPrefix}
	batch := func(run string, from, to int) []rewardswf.Change {
		var out []rewardswf.Change
		for i := from; i <= to; i++ {
			out = append(out, change(rewardswf.ChangeBalanceChanged, func(c *rewardswf.Change) { c.Seq, c.Delta, c.EntityRunID = int64(i), 10, run }))
		}
		return out
	}
	for _, b := range [][]rewardswf.Change{batch("run-a", 1, 3), batch("run-a", 2, 5), batch("run-b", 1, 2)} {
		time.Sleep(2 * window) // each publication after the window
		if err := p.Publish(ctx, b, true); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"run-a:1", "run-a:2", "run-a:3", "run-a:4", "run-a:5", "run-b:1", "run-b:2"}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(want)) {
		t.Fatalf("the stream holds %d changes, want %d", info.State.Msgs, len(want))
	}
	for i, w := range want {
		m, err := s.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		var c rewardswf.Change
		if err := json.Unmarshal(m.Data, &c); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%s:%d", c.EntityRunID, c.Seq); got != w {
			t.Fatalf("message %d is %s, want %s", i+1, got, w)
		}
	}
}
