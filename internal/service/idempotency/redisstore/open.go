package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Open connects to the Redis server named by url (redis://[user:password@]
// host:port[/db], or rediss:// for TLS; see redis.ParseURL for the options)
// and checks that it answers, so that a wrong IDEMPOTENCY_STORE fails at
// start-up rather than at the first request. The caller closes the client.
func Open(ctx context.Context, url string) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("open redis: %w", err)
	}
	client := redis.NewClient(opts)
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("open redis %s: %w", opts.Addr, err)
	}
	return client, nil
}

// IsUnavailable reports whether err, from Open or a Store method, is a
// failure to reach Redis rather than a logical one: the connection was
// refused, dropped or timed out, the client was closed or its pool
// exhausted, or the server cannot serve now (LOADING, READONLY replica,
// MASTERDOWN, CLUSTERDOWN, TRYAGAIN, too many clients). The HTTP layer fails
// closed on every store error, answering 503 for these.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) ||
		redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsMaxClientsError(err)
}
