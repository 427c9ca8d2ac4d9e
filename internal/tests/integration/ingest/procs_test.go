package ingest_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// scrape reads the metric families of a /metrics endpoint; nil while it
// does not answer.
func scrape(addr string) []*dto.MetricFamily {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil
	}
	families := make([]*dto.MetricFamily, 0, len(byName))
	for _, f := range byName {
		families = append(families, f)
	}
	return families
}

// has reports whether families holds one named name.
func has(families []*dto.MetricFamily, name string) bool {
	return slices.ContainsFunc(families, func(f *dto.MetricFamily) bool { return f.GetName() == name })
}

// handledIn sums ingest_handled_total of the points source in a scrape.
func handledIn(families []*dto.MetricFamily) float64 {
	var n float64
	for _, o := range []string{ingress.OutcomeApplied, ingress.OutcomeDuplicate, ingress.OutcomeDeadLettered} {
		n += sum(families, "ingest_handled_total", map[string]string{"outcome": o, "source": ingress.SourcePoints})
	}
	return n
}

// fleet runs the project's worker as processes on one dev server and one
// NATS server: one polling the rewards task queue, and ingress-only
// processes (worker -task-queues none -ingest) on the test's streams.
type fleet struct {
	t      testing.TB
	e      *env
	bin    string
	ingest []string

	mu    sync.Mutex
	procs []*ingressProc
}

// ingressProc is one ingress process and what its /metrics said last.
type ingressProc struct {
	*testenv.Process
	name, addr string
	handled    float64 // ingest_handled_total of points at the last look
}

// ackWait is the ingress processes' ack wait: what a killed process held
// comes again after it.
const ackWait = 5 * time.Second

// testLoad are the flags of the tests' ingress processes: fewer messages
// applied at once and held per partition than in production, so that three
// processes do not swamp one dev server on a small machine.
var testLoad = []string{"-ingest-workers", "16", "-ingest-max-ack-pending", "200"}

// newFleet builds the worker and starts the process polling the rewards
// task queue of the Temporal server at address; the ingress processes get
// the flags extra beside the test's.
func newFleet(t testing.TB, e *env, address string, extra ...string) *fleet {
	t.Helper()
	bin := testenv.BuildProgram(t, testenv.WorkerPackage)
	startWorkers(t, bin, address, "sqlite://"+filepath.Join(t.TempDir(), "entities.db"), 1)
	return ingressFleet(t, e, address, bin, extra...)
}

// startWorkers starts n processes of the worker bin polling the rewards task
// queue of the Temporal server at address, on the database databaseURL.
func startWorkers(t testing.TB, bin, address, databaseURL string, n int) []*testenv.Process {
	t.Helper()
	procs := make([]*testenv.Process, n)
	for i := range procs {
		procs[i] = testenv.StartProgram(t, bin, "-address", address, "-log-level", "error", "-database-url", databaseURL,
			"-metrics-addr", "off", "-task-queues", rewards.RewardsTaskQueue)
	}
	return procs
}

// ingressFleet runs ingress processes of bin on e's streams, with the flags
// extra beside the test's, against the Temporal server at address.
func ingressFleet(t testing.TB, e *env, address, bin string, extra ...string) *fleet {
	// The ingress processes log their partitions' hand-overs (in the
	// test's output, shown when it fails or under -v); INGEST_TEST_LOG_LEVEL=debug
	// adds every message's handling and every balance decision.
	level := os.Getenv("INGEST_TEST_LOG_LEVEL")
	if level == "" {
		level = "info"
	}
	ingestCommon := []string{"-address", address, "-log-level", level}
	return &fleet{t: t, e: e, bin: bin, ingest: append(append(ingestCommon, "-database-url", "sqlite://"+filepath.Join(t.TempDir(), "ingest.db"),
		"-task-queues", "none", "-ingest", "-nats-url", e.natsURL,
		"-ingest-points-stream", e.cfg.PointsStream, "-ingest-points-prefix", e.cfg.PointsPrefix,
		"-ingest-events-stream", "off", "-ingest-dead-letter-stream", e.cfg.DeadLetterStream,
		"-ingest-dead-letter-prefix", e.cfg.DeadLetterPrefix, "-ingest-stream-duplicates", "1s",
		"-ingest-ack-wait", ackWait.String(), "-ingest-pin-ttl", e.cfg.PinnedTTL.String(), "-ingest-tenants", "default,t-2"), extra...)}
}

// start runs another ingress process and waits until it serves /metrics
// and the streams exist.
func (f *fleet) start(name string) *ingressProc {
	f.t.Helper()
	addr, err := natsserver.FreeAddress()
	if err != nil {
		f.t.Fatal(err)
	}
	p := &ingressProc{Process: testenv.StartProgram(f.t, f.bin, append(slices.Clone(f.ingest), "-metrics-addr", addr)...), name: name, addr: addr}
	waitFor(f.t, name+"'s streams and /metrics", time.Minute, func() (bool, error) {
		if !has(scrape(addr), "ingest_held_messages") {
			return false, nil
		}
		_, err := f.e.js.Stream(context.Background(), f.e.cfg.PointsStream)
		return err == nil, nil
	})
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p
}

// handled returns the point messages every ingress process handled, as
// their /metrics said last (a process that ended, at its last look).
func (f *fleet) handled() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n float64
	for _, p := range f.procs {
		select {
		case <-p.Done():
		default:
			if m := scrape(p.addr); m != nil {
				p.handled = handledIn(m)
			}
		}
		n += p.handled
	}
	return n
}

// partitionsHeld reads ingest_partitions_held of p; -1 if it does not answer.
func (p *ingressProc) partitionsHeld() float64 {
	m := scrape(p.addr)
	if m == nil {
		return -1
	}
	return sum(m, "ingest_partitions_held", nil)
}

// acks records, per partition consumer, when JetStream was last told an
// ack: the acks go to $JS.ACK.{stream}.{consumer}.>, which any client may
// listen to.
type acks struct {
	mu   sync.Mutex
	last map[string]time.Time
	sub  *nats.Subscription
}

func watchAcks(t *testing.T, url, stream string) *acks {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a := &acks{last: map[string]time.Time{}}
	a.sub, err = nc.Subscribe("$JS.ACK.>", func(m *nats.Msg) {
		if body := string(m.Data); body != "" && body != "+ACK" {
			return // a nak, an in-progress
		}
		// $JS.ACK.{stream}.{consumer}.… (or with a domain and an account
		// hash before the stream)
		tokens := strings.Split(m.Subject, ".")
		i := slices.Index(tokens, stream)
		if i < 0 || i+1 >= len(tokens) {
			return
		}
		consumer := tokens[i+1]
		a.mu.Lock()
		a.last[consumer] = time.Now()
		a.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// lastAck returns when consumer last acked a message.
func (a *acks) lastAck(consumer string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last[consumer]
}
