package changefeed_test

import (
	"fmt"
	"testing"

	"github.com/entityflow/entityflow/internal/service/changefeed"
	rewardswf "github.com/entityflow/entityflow/workflows/rewards"
)

// BenchmarkPublish measures one publication of one change against a real
// NATS server: a first publication (again=false: the publish and its ack)
// and one sent again (again=true: the read of the stream's last message on
// the entity's subject first), so the read's cost is the difference.
func BenchmarkPublish(b *testing.B) {
	for _, again := range []bool{false, true} {
		b.Run(fmt.Sprintf("again=%v", again), func(b *testing.B) {
			ctx, js := jetStream(b)
			if err := changefeed.EnsureStream(ctx, js, changefeed.Config{Mode: rewardswf.FeedAll}); err != nil {
				b.Fatal(err)
			}
			p := &changefeed.Publisher{JS: js, Stream: changefeed.DefaultStream, Prefix: changefeed.DefaultPrefix}
			e := entity{tenant: "t-1", customer: "c-1", run: "run-a", from: at}
			changes := e.changes(1, b.N)
			b.ResetTimer()
			for i := range b.N {
				if err := p.Publish(ctx, changes[i:i+1], again); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
