package ingest_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// A tenant over its quota (-ingest-tenant-rates) is slowed while another
// tenant's messages, published after all of its own, are applied: when the
// quiet tenant's last event is applied, at most half of the noisy tenant's
// are. Every noisy message is applied in the end, each customer's in stream
// order, none dead-lettered or lost.
func TestIngressTenantQuota(t *testing.T) {
	e := newEnv(t)
	const (
		noisy, quiet                         = "t-1", "t-2"
		noisyCustomers, noisyEach            = 4, 5
		quietCustomers, quietEach            = 2, 10
		noisyRate                 rate.Limit = 0.5
	)
	e.cfg.TenantRates = map[string]rate.Limit{noisy: noisyRate}
	e.cfg.TenantBurst = 1
	reg := prometheus.NewRegistry()
	e.start(reg)

	customers := func(tenant string, n int) []string {
		var cs []string
		for i := range n {
			cs = append(cs, fmt.Sprintf("%s-c%d", tenant, i))
		}
		return cs
	}
	keys := map[string][]string{}
	publish := func(tenant string, cs []string, each int) {
		for i := range each {
			for _, c := range cs {
				ev := rewards.PointEvent{DedupKey: fmt.Sprintf("%s-%02d", c, i), Activity: "purchase", Points: 1}
				keys[c] = append(keys[c], ev.DedupKey)
				e.publish(ingress.PointsSubject(e.cfg.PointsPrefix, tenant, c), mustJSON(t, ev), ev.DedupKey)
			}
		}
	}
	noisyCs, quietCs := customers(noisy, noisyCustomers), customers(quiet, quietCustomers)
	began := time.Now()
	publish(noisy, noisyCs, noisyEach)
	publish(quiet, quietCs, quietEach)

	ctx := background(t)
	applied := func(tenant string, cs []string) (int, error) {
		total := 0
		for _, c := range cs {
			st, err := e.rewards.For(tenant).Status(ctx, c)
			if errors.Is(err, rewardsclient.ErrUnknownCustomer) {
				continue
			}
			if err != nil {
				return 0, err
			}
			total += int(st.EventCount)
		}
		return total, nil
	}
	waitFor(t, "the quiet tenant's events applied", 2*time.Minute, func() (bool, error) {
		n, err := applied(quiet, quietCs)
		return n == quietCustomers*quietEach, err
	})
	noisyThen, err := applied(noisy, noisyCs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("quiet tenant done (%d events) after %v; noisy tenant: %d of %d applied", quietCustomers*quietEach,
		time.Since(began).Round(time.Millisecond), noisyThen, noisyCustomers*noisyEach)
	if noisyThen > noisyCustomers*noisyEach/2 {
		t.Errorf("the noisy tenant had %d of its %d events applied before the quiet tenant's last: want at most half, its quota holding it back",
			noisyThen, noisyCustomers*noisyEach)
	}

	waitFor(t, "the noisy tenant's events applied", 3*time.Minute, func() (bool, error) {
		n, err := applied(noisy, noisyCs)
		return n == noisyCustomers*noisyEach, err
	})
	t.Logf("noisy tenant done after %v", time.Since(began).Round(time.Millisecond))
	for _, c := range noisyCs {
		if got := appliedOrder(t, e.c, rewards.RewardsWorkflowIDFor(noisy, c)); !slices.Equal(got, keys[c]) {
			t.Errorf("%s applied in the order %v, want %v", c, got, keys[c])
		}
	}
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Errorf("%d dead letters, want none; the first: %v", len(dl), dl[0].Headers())
	}
	limited := counter(t, reg, "ingest_retried_total", map[string]string{"reason": ingress.ReasonTenantLimited})
	if limited == 0 {
		t.Error("no message was nacked for its tenant's quota")
	}
	t.Logf("retried: %v tenant_limited, %v deferred, %v transient, %v unexplained", limited,
		counter(t, reg, "ingest_retried_total", map[string]string{"reason": "deferred"}),
		counter(t, reg, "ingest_retried_total", map[string]string{"reason": "transient"}),
		counter(t, reg, "ingest_retried_total", map[string]string{"reason": "unexplained"}))
}
