package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// replicaKeys and replicaCustomers size TestTwoReplicasOneKilled: every key
// is one points command, sent to both replicas at once.
const (
	replicaKeys      = 1200
	replicaCustomers = 20
	// replicaLockTTL is the replicas' -idempotency-lock-ttl: how long a key
	// claimed by the killed replica answers 409 in progress before the
	// survivor may take it over.
	replicaLockTTL = 10 * time.Second
)

// Two `starter serve` processes share one database and one idempotency key
// store, as replicas behind a balancer do. Every command is sent to both at
// once under the same key, and one replica is SIGKILLed half-way; a request
// it leaves unanswered goes to the survivor, as a balancer would send it.
// Every key ends with exactly one outcome, the same from both replicas, and
// every balance is exact. A key the killed replica had sent to its entity
// when it died is answered, once its claim lapses, by the survivor from the
// entity's dedup window (applied, duplicate: the event counted once). Run once
// with Redis and once with the SQL key store on PostgreSQL.
func TestTwoReplicasOneKilled(t *testing.T) {
	testenv.Short(t, "two API processes on PostgreSQL and Redis")
	srv := devserver.ForTest(t, devserver.Options{})
	starterBin := testenv.BuildProgram(t, "github.com/entityflow/entityflow/starter")
	workerBin := testenv.BuildProgram(t, testenv.WorkerPackage)
	for _, store := range []struct{ name, spec string }{
		{"redis", "redis"},
		{"sql", "sql"},
	} {
		t.Run(store.name, func(t *testing.T) {
			spec := store.spec
			if spec == "redis" {
				// The replicas' key store is a Redis of the test's own
				// choosing (TEST_REDIS_URL); dbtest.Redis checks it answers.
				dbtest.Redis(t)
				spec = dbtest.RedisURL()
			}
			runReplicas(t, srv.FrontendHostPort(), starterBin, workerBin, spec)
		})
	}
}

// runReplicas runs the test of TestTwoReplicasOneKilled with key store spec.
func runReplicas(t *testing.T, temporal, starterBin, workerBin, keyStore string) {
	db := dbtest.Postgres(t)
	st, err := store.Open(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	token := authtest.WithStore(st).Issue(t, tenant.Default)

	testenv.StartProgram(t, workerBin, "-address", temporal, "-log-level", "error", "-database-url", db.URL,
		"-metrics-addr", "off", "-task-queues", rewards.RewardsTaskQueue)
	var replicas [2]*replica
	for i := range replicas {
		addr, err := natsserver.FreeAddress()
		if err != nil {
			t.Fatal(err)
		}
		replicas[i] = &replica{
			url: "http://" + addr,
			proc: testenv.StartProgram(t, starterBin, "serve", "-address", temporal, "-http-addr", addr, "-log-level", "error",
				"-database-url", db.URL, "-idempotency-store", keyStore, "-idempotency-lock-ttl", replicaLockTTL.String(),
				"-idempotency-ttl", "10m", "-tenant-rate", "inf"),
		}
	}
	// Each replica limits a tenant's rate on its own (-tenant-rate); the
	// test turns the limit off, as it sends every command twice.
	for _, r := range replicas {
		r.waitHealthy(t)
	}

	// Keys of this run only: the Redis key store outlives the test.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	rng := rand.New(rand.NewPCG(1, 2))
	type command struct {
		key, customer string
		points        int64
	}
	commands := make([]command, replicaKeys)
	want := map[string]int64{}
	for i := range commands {
		c := command{key: fmt.Sprintf("rep-%s-%d", run, i), customer: fmt.Sprintf("c-rep-%s-%d", run, i%replicaCustomers), points: 1 + rng.Int64N(20)}
		commands[i] = c
		want[c.customer] += c.points
	}

	client := &http.Client{Timeout: 30 * time.Second}
	answers := make([][2]answer, len(commands))
	var sent atomic.Int64
	killed := make(chan struct{})
	var killOnce sync.Once
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() {
			for i := range jobs {
				if sent.Add(1) == replicaKeys/2 {
					killOnce.Do(func() {
						replicas[1].proc.Signal(syscall.SIGKILL)
						close(killed)
					})
				}
				c := commands[i]
				body, err := json.Marshal(map[string]any{"points": c.points})
				if err != nil {
					t.Error(err)
					return
				}
				var both sync.WaitGroup
				for r := range replicas {
					both.Go(func() {
						answers[i][r] = send(client, replicas, r, killed, "/v1/customers/"+c.customer+"/points", c.key, token, body)
					})
				}
				both.Wait()
			}
		})
	}
	for i := range commands {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if t.Failed() {
		return
	}

	var failedOver, resent, bothAnswered int
	for i, c := range commands {
		a, b := answers[i][0], answers[i][1]
		if a.err != nil || b.err != nil {
			t.Fatalf("key %s: no answer: %v / %v", c.key, a.err, b.err)
		}
		if a.status != http.StatusOK || b.status != http.StatusOK {
			t.Fatalf("key %s: answers %d %s / %d %s, want 200 from both", c.key, a.status, a.body, b.status, b.body)
		}
		var ra, rb rewards.PointsResult
		if err := json.Unmarshal(a.body, &ra); err != nil {
			t.Fatalf("key %s: %v: %s", c.key, err, a.body)
		}
		if err := json.Unmarshal(b.body, &rb); err != nil {
			t.Fatalf("key %s: %v: %s", c.key, err, b.body)
		}
		if ra != rb || !ra.Applied {
			t.Fatalf("key %s: answers %+v and %+v, want one applied outcome, the same on both", c.key, ra, rb)
		}
		if ra.Duplicate {
			// The claim's holder had sent the event and then died, or
			// outlived its claim (-idempotency-lock-ttl); the next holder
			// sent it again and the entity answered from its dedup window.
			resent++
		}
		if b.by == 0 {
			failedOver++
		} else {
			bothAnswered++
		}
	}
	if failedOver == 0 || bothAnswered == 0 {
		t.Fatalf("%d keys answered by both replicas, %d moved to the survivor: the kill did not land mid-way", bothAnswered, failedOver)
	}
	for customer, points := range want {
		r := get(t, client, replicas[0].url+"/v1/customers/"+customer, token)
		var status rewards.Status
		if err := json.Unmarshal(r.body, &status); r.status != http.StatusOK || err != nil {
			t.Fatalf("status of %s: %d %s (%v)", customer, r.status, r.body, err)
		}
		if status.Points != points {
			t.Errorf("%s: %d points, want %d", customer, status.Points, points)
		}
	}
	t.Logf("%d keys: %d answered by both replicas, %d by the survivor after the kill; %d sent to their entity twice and answered from its dedup window; %d balances exact",
		replicaKeys, bothAnswered, failedOver, resent, len(want))
}

// replica is one `starter serve` process.
type replica struct {
	url  string
	proc *testenv.Process
}

// waitHealthy waits until the replica's /healthz answers 200.
func (r *replica) waitHealthy(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(r.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/healthz: not healthy after a minute (%v)", r.url, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// answer is a replica's final answer to one command; by is the replica that
// gave it (the survivor, 0, for one sent to the killed replica after it died).
type answer struct {
	status int
	body   []byte
	by     int
	err    error
}

// send posts one command to replica r until it gets a final answer, as a
// client behind a balancer does: 409 in progress, 429 and 5xx are sent
// again after Retry-After (capped), and a request the replica leaves
// unanswered because it was killed goes to the survivor, replica 0.
func send(client *http.Client, replicas [2]*replica, r int, killed <-chan struct{}, path, key, token string, body []byte) answer {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		req, err := http.NewRequest(http.MethodPost, replicas[r].url+path, bytes.NewReader(body))
		if err != nil {
			return answer{err: err}
		}
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			select {
			case <-killed:
				if r != 0 {
					r = 0
					continue
				}
			default:
			}
			if time.Now().After(deadline) {
				return answer{err: fmt.Errorf("replica %d: %w", r, err)}
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return answer{err: err}
		}
		switch {
		case resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			if time.Now().After(deadline) {
				return answer{status: resp.StatusCode, body: b, by: r, err: errors.New("still not final after two minutes")}
			}
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			time.Sleep(min(time.Duration(wait)*time.Second, 500*time.Millisecond))
		default:
			return answer{status: resp.StatusCode, body: b, by: r}
		}
	}
}

// get sends one authenticated GET.
func get(t *testing.T, client *http.Client, url, token string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, body: b}
}
