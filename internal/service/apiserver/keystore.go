package apiserver

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/idempotency/redisstore"
	"github.com/entityflow/entityflow/internal/service/idempotency/sqlstore"
	"github.com/entityflow/entityflow/store"
)

// openKeyStore opens the idempotency key store spec names: "memory", a
// redis:// URL (go-redis then logs through logger; Redis need not answer
// yet), or "sql" for the project's database (with a reaper of expired keys
// running until ctx ends).
func openKeyStore(ctx context.Context, spec string, st *store.Store, logger *slog.Logger) (idempotency.KeyStore, func(), error) {
	switch {
	case spec == "" || spec == "memory":
		return memory.NewStore(0), func() {}, nil
	case strings.HasPrefix(spec, "redis://") || strings.HasPrefix(spec, "rediss://"):
		redis.SetLogger(redisstore.Logger{Slog: logger})
		opts, err := redis.ParseURL(spec)
		if err != nil {
			return nil, nil, fmt.Errorf("IDEMPOTENCY_STORE: %w", err)
		}
		rc := redis.NewClient(opts)
		// The client connects on demand: Redis need not answer at start, and
		// commands answer 503 (idempotency-store-unavailable) while it
		// does not. A refusal (a wrong password) stops the start.
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := rc.Ping(pctx).Err(); err != nil {
			if !redisstore.IsUnavailable(err) {
				rc.Close()
				return nil, nil, fmt.Errorf("IDEMPOTENCY_STORE: Redis at %s: %w", opts.Addr, err)
			}
			logger.Warn("Redis not reachable yet; commands answer 503 until it is", "addr", opts.Addr, "error", err)
		}
		return redisstore.New(rc, "entityflow:idem:"), func() { rc.Close() }, nil
	case spec == "sql":
		ks := sqlstore.New(st)
		ks.OnReapError = func(err error) { logger.Warn("reaping idempotency keys", "error", err) }
		rctx, cancel := context.WithCancel(ctx)
		go ks.RunReaper(rctx, time.Minute)
		return ks, cancel, nil
	default:
		return nil, nil, fmt.Errorf("IDEMPOTENCY_STORE %q: want memory, redis://..., or sql", spec)
	}
}

// storeKind names a key store spec without its credentials.
func storeKind(spec string) string {
	if strings.HasPrefix(spec, "redis") {
		return "redis"
	}
	if spec == "" {
		return "memory"
	}
	return spec
}

// queueSize is admission.Limiter's MaxQueue for a queue of n (0: no queue).
func queueSize(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
