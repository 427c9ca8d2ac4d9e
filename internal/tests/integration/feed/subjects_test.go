package feed_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// readFiltered reads, with an ordered consumer filtering subjects, the
// changes the feed's stream holds there, in the stream's order.
func (e *env) readFiltered(ctx context.Context, subjects ...string) []rewards.Change {
	e.t.Helper()
	cons, err := e.reader().OrderedConsumer(ctx, changefeed.DefaultStream, jetstream.OrderedConsumerConfig{FilterSubjects: subjects})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []rewards.Change
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			e.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var c rewards.Change
			if err := json.Unmarshal(m.Data(), &c); err != nil {
				e.t.Fatalf("message on %s: %v", m.Subject(), err)
			}
			out = append(out, c)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			e.t.Fatal(err)
		}
		if n == 0 {
			return out
		}
	}
}

// From the worker program: tenant acme.eu's customer c1 and tenant acme's
// customer eu.c1, which shared the subject changes.rewards.acme.eu.c1
// before each ID became one token, publish each on a subject of its own
// (readStream checks every message's subject), each entity's changes once
// and in order; a consumer filtering changes.rewards.acme.> receives tenant
// acme's changes and no other tenant's, one filtering
// changes.rewards.acme%2Eeu.> tenant acme.eu's only.
func TestFeedKeepsTenantsApart(t *testing.T) {
	e := newEnv(t, 50)
	e.startWorker(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var ids []string
	for _, c := range []struct{ tenant, customer string }{{"acme.eu", "c1"}, {"acme", "eu.c1"}, {"acme", "c2"}} {
		rc := e.rc.For(c.tenant)
		e.apply(ctx, rc, []string{c.customer}, 12, nil)
		e.unenroll(ctx, rc, []string{c.customer})
		ids = append(ids, rewards.RewardsWorkflowIDFor(c.tenant, c.customer))
	}
	e.waitClosed(ctx, ids)
	all := e.readStream(ctx)
	n := check(t, all, ids)
	perTenant := map[string]int{}
	for _, m := range all {
		perTenant[m.change.TenantID]++
	}
	for _, tc := range []struct{ filter, tenant string }{
		{"changes.rewards.acme.>", "acme"},
		{"changes.rewards.acme%2Eeu.>", "acme.eu"},
	} {
		got := e.readFiltered(ctx, tc.filter)
		for _, c := range got {
			if c.TenantID != tc.tenant {
				t.Errorf("a consumer of %s received tenant %s's change %s", tc.filter, c.TenantID, c.MsgID())
			}
		}
		if len(got) != perTenant[tc.tenant] || len(got) == 0 {
			t.Errorf("a consumer of %s received %d changes, want tenant %s's %d", tc.filter, len(got), tc.tenant, perTenant[tc.tenant])
		}
	}
	t.Logf("%d changes of 3 entities of 2 tenants: %v", n, perTenant)
}
