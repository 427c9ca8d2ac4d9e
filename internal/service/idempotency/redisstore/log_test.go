package redisstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/idempotency/redisstore"
)

// go-redis's own messages come out through the program's slog handler, as
// one warning each, rather than on stderr in the standard logger's format.
func TestLoggerRoutesGoRedisThroughSlog(t *testing.T) {
	_ = func() { redis.SetLogger(redisstore.Logger{}) } // it is a go-redis logger
	var buf bytes.Buffer
	l := redisstore.Logger{Slog: slog.New(slog.NewJSONHandler(&buf, nil))}
	l.Printf(context.Background(), "connection pool: failed to dial after %d attempts: %v\n", 5, errors.New("connection refused"))

	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line), "one JSON log line: %s", buf.String())
	assert.Equal(t, "WARN", line["level"])
	assert.Equal(t, "connection pool: failed to dial after 5 attempts: connection refused", line["msg"])
	assert.Equal(t, "go-redis", line["component"])
}
