package live

import (
	"time"

	"github.com/coder/websocket"
)

// The traffic overview (SPEC §11) streams through the same hub as windows do,
// so its viewers count against the same caps, get the clock and the Redis
// status, and are dropped the same way when they fall behind. An overview's
// topic is a Window whose Policy is overviewTopic and whose Key is the policy
// shown; like a lab's, no policy can be named so.
const overviewTopic = "@overview"

func overviewWindow(policy string) Window { return Window{Key: policy, Policy: overviewTopic} }

// NowMs estimates the limiter's clock (Redis time) in epoch milliseconds from
// the last tick.
func (v *View) NowMs() int64 { return v.nowMs() }

// ServeOverview streams policy's overview to conn, as Serve does a window:
// first the Redis status and the overview message first returns, then every
// overview PublishOverview sends, the clock and the viewer count.
func (v *View) ServeOverview(conn *websocket.Conn, policy string, first func() []byte) {
	v.serve(conn, overviewWindow(policy), func(time.Time) [][]byte {
		return [][]byte{*v.clock.status.Load(), first()}
	})
}

// PublishOverview sends policy's overview message to its viewers on this
// instance; a newer one replaces one not yet sent.
func (v *View) PublishOverview(policy string, msg []byte) {
	v.hub.PublishLatest(overviewWindow(policy), kindOverview, msg)
}

// OverviewWatched lists the policies whose overview viewers of this instance
// watch.
func (v *View) OverviewWatched() []string {
	var out []string
	for _, w := range v.hub.Topics() {
		if w.Policy == overviewTopic {
			out = append(out, w.Key)
		}
	}
	return out
}
