package ingress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// members is this process's entry among the ingress processes sharing a
// points stream: a key of its own in a JetStream key-value bucket whose keys
// expire after the pin TTL, written again every third of it. Counting the
// keys gives how many processes share the partitions (balance), a process
// that died dropping out within the TTL. It is no lock: the partitions'
// pins alone decide who consumes what.
type members struct {
	kv  jetstream.KeyValue
	key string
	ttl time.Duration
}

// membersBucket is the bucket of the processes sharing the points stream's
// partitions: {stream}_{durable}_members, with any character a bucket name
// cannot hold replaced by '_'.
func membersBucket(cfg Config) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, cfg.PointsStream+"_"+cfg.PointsDurable+"_members")
}

// membersTimeout bounds each request to the bucket (a publish the server
// does not permit is never answered).
const membersTimeout = 10 * time.Second

// joinMembers creates the bucket if it is missing (or sets its TTL) and
// writes this process's key.
func joinMembers(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration) (*members, error) {
	ctx, cancel := context.WithTimeout(ctx, membersTimeout)
	defer cancel()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucket, TTL: ttl, History: 1, Storage: jetstream.FileStorage,
		Description: "entityflow ingest: the processes sharing the points partitions",
	})
	if err != nil {
		return nil, fmt.Errorf("ingress: key-value bucket %s: %w", bucket, err)
	}
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	m := &members{kv: kv, key: hex.EncodeToString(raw[:]), ttl: ttl}
	if err := m.beat(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// beat writes this process's key again, before it expires.
func (m *members) beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, membersTimeout)
	defer cancel()
	host, _ := os.Hostname()
	if _, err := m.kv.Put(ctx, m.key, fmt.Appendf(nil, "%s pid %d", host, os.Getpid())); err != nil {
		return fmt.Errorf("ingress: announcing this process in bucket %s (the ingress's NATS user needs to publish to $KV.>): %w", m.kv.Bucket(), err)
	}
	return nil
}

// count returns how many processes have a live key, this one included.
func (m *members) count(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, membersTimeout)
	defer cancel()
	keys, err := m.kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ingress: listing bucket %s: %w", m.kv.Bucket(), err)
	}
	return max(len(keys), 1), nil
}

// leave removes this process's key, so that the others take its share at
// once rather than after the TTL.
func (m *members) leave(ctx context.Context) {
	_ = m.kv.Purge(ctx, m.key)
}
