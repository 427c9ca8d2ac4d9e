// Package redisstore is a idempotency.KeyStore in Redis, for API processes that
// share Idempotency-Keys: each key is a hash that expires by itself, and each
// operation is one Lua script, atomic on the server.
package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/entityflow/entityflow/internal/service/idempotency"
)

// Store is a idempotency.KeyStore on a Redis server or cluster. It is safe for
// concurrent use, by any number of processes sharing the server.
type Store struct {
	client redis.UniversalClient
	prefix string
}

// New returns a Store keeping each key as the hash prefix+key on client.
// The prefix keeps the keys apart from other data on the server (such as
// "entityflow:idem:").
func New(client redis.UniversalClient, prefix string) *Store {
	return &Store{client: client, prefix: prefix}
}

// Claim implements idempotency.KeyStore.
func (s *Store) Claim(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (idempotency.Claim, error) {
	owner := idempotency.NewOwnerToken()
	res, err := claimScript.Run(ctx, s.client, []string{s.prefix + key}, fingerprint, owner, ttlMillis(lockTTL)).Slice()
	if err != nil {
		return idempotency.Claim{}, fmt.Errorf("claim idempotency key in redis: %w", err)
	}
	c, err := parseClaim(res, owner)
	if err != nil {
		return idempotency.Claim{}, fmt.Errorf("claim idempotency key in redis: %w", err)
	}
	return c, nil
}

// Complete implements idempotency.KeyStore.
func (s *Store) Complete(ctx context.Context, key, owner string, resp idempotency.Response, ttl time.Duration) error {
	header, err := json.Marshal(resp.Header)
	if err != nil {
		return fmt.Errorf("complete idempotency key in redis: encode header: %w", err)
	}
	done, err := completeScript.Run(ctx, s.client, []string{s.prefix + key},
		owner, idempotency.FinalState(resp.Status), resp.Status, header, resp.Body, ttlMillis(ttl)).Int()
	if err != nil {
		return fmt.Errorf("complete idempotency key in redis: %w", err)
	}
	if done == 0 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// Release implements idempotency.KeyStore.
func (s *Store) Release(ctx context.Context, key, owner string) error {
	done, err := releaseScript.Run(ctx, s.client, []string{s.prefix + key}, owner).Int()
	if err != nil {
		return fmt.Errorf("release idempotency key in redis: %w", err)
	}
	if done == 0 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// Ping implements idempotency.KeyStore with Redis's PING.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping redis: %w", err)
	}
	return nil
}

// ttlMillis is d in whole milliseconds for PEXPIRE, at least 1: Redis
// rejects a zero or negative expiry.
func ttlMillis(d time.Duration) int64 {
	return max(d.Milliseconds(), 1)
}

// parseClaim reads claimScript's answer; owner is the token the script was
// given, which is the caller's on "claimed".
func parseClaim(res []any, owner string) (idempotency.Claim, error) {
	if len(res) == 0 {
		return idempotency.Claim{}, errors.New("empty script reply")
	}
	switch res[0] {
	case "claimed":
		return idempotency.Claim{Outcome: idempotency.Claimed, Owner: owner}, nil
	case "mismatch":
		return idempotency.Claim{Outcome: idempotency.Mismatch}, nil
	case "in_progress":
		if len(res) != 3 {
			return idempotency.Claim{}, fmt.Errorf("in_progress reply of %d elements", len(res))
		}
		remaining, ok := res[1].(int64)
		if !ok {
			return idempotency.Claim{}, fmt.Errorf("in_progress reply: remaining lock %T", res[1])
		}
		age, ok := res[2].(int64)
		if !ok {
			return idempotency.Claim{}, fmt.Errorf("in_progress reply: age %T", res[2])
		}
		return idempotency.Claim{Outcome: idempotency.InProgress, RetryAfter: time.Duration(remaining) * time.Millisecond,
			Age: time.Duration(age) * time.Millisecond}, nil
	case "replay":
		resp, err := parseResponse(res[1:])
		if err != nil {
			return idempotency.Claim{}, fmt.Errorf("replay reply: %w", err)
		}
		return idempotency.Claim{Outcome: idempotency.Replay, Response: &resp}, nil
	}
	return idempotency.Claim{}, fmt.Errorf("unknown script reply %v", res[0])
}

// parseResponse reads the status, header JSON and body of a replay reply.
func parseResponse(fields []any) (idempotency.Response, error) {
	if len(fields) != 3 {
		return idempotency.Response{}, fmt.Errorf("stored response of %d fields, want status, header and body", len(fields))
	}
	var resp idempotency.Response
	switch status := fields[0].(type) {
	case int64:
		resp.Status = int(status)
	case string:
		n, err := strconv.Atoi(status)
		if err != nil {
			return idempotency.Response{}, fmt.Errorf("status: %w", err)
		}
		resp.Status = n
	default:
		return idempotency.Response{}, fmt.Errorf("status of type %T", fields[0])
	}
	if header, ok := fields[1].(string); ok && header != "" {
		if err := json.Unmarshal([]byte(header), &resp.Header); err != nil {
			return idempotency.Response{}, fmt.Errorf("header: %w", err)
		}
	}
	if body, ok := fields[2].(string); ok {
		resp.Body = []byte(body)
	}
	return resp, nil
}

var _ idempotency.KeyStore = (*Store)(nil)
