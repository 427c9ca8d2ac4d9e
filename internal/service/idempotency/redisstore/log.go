package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// Logger carries go-redis's own messages (a pool that cannot dial, a
// connection dropped, a recovered panic) to slog, so that they come out in
// the program's log format rather than on stderr through the standard
// logger. Install it with redis.SetLogger(redisstore.Logger{Slog: logger});
// the setting is global to the process.
type Logger struct {
	// Slog receives the messages; nil means slog.Default().
	Slog *slog.Logger
}

// Printf logs one go-redis message as a warning (the library logs trouble
// only), marked component=go-redis.
func (l Logger) Printf(ctx context.Context, format string, args ...any) {
	logger := l.Slog
	if logger == nil {
		logger = slog.Default()
	}
	logger.Log(ctx, slog.LevelWarn, strings.TrimSpace(fmt.Sprintf(format, args...)), "component", "go-redis")
}
