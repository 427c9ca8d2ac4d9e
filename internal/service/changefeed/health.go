package changefeed

import (
	"context"
	"fmt"
)

// Check reports whether the feed can publish now, for the worker's GET
// /healthz: nil once it has connected to NATS and ensured its stream and
// while its connection is up; otherwise why not (still connecting, the
// stream not ensured, or the connection lost and reconnecting).
func (f *Feed) Check(context.Context) error {
	p := f.pub.Load()
	if p == nil {
		f.mu.Lock()
		why := f.waiting
		f.mu.Unlock()
		return fmt.Errorf("change feed not ready: %w", why)
	}
	if nc := p.JS.Conn(); !nc.IsConnected() {
		return fmt.Errorf("change feed: the NATS connection is %s", nc.Status())
	}
	return nil
}
