package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/devserver"
	"github.com/entityflow/entityflow/internal/rewardsclient"
)

func TestTmpSingleProcessOrder(t *testing.T) {
	url, js := natsJetStream(t)
	srv := devserver.ForTest(t, devserver.Options{})
	e := &env{t: t, natsURL: url, js: js, cfg: testConfig()}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	c := srv.Client()
	rc := &rewardsclient.Client{Temporal: c, Logger: quietLogger(t)}
	f := newFleet(t, e, srv, testLoad...)
	unenrollGone(t, ctx, c, rc)
	f.start("a")
	w := newWorkload(t, e.cfg.PointsPrefix)
	w.publishAll(t, e, 0)
	began := time.Now()
	waitFor(t, "drained", 8*time.Minute, func() (bool, error) {
		pending, unacked := e.backlog(ctx)
		return pending == 0 && unacked == 0, nil
	})
	t.Logf("drained in %v", time.Since(began))
	w.check(t, ctx, e, c, rc)
}
