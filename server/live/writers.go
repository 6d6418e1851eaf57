package live

import (
	"runtime"
	"sync"
	"time"
)

// Viewers' frames are written by a few writers shared by all viewers, not by
// a goroutine of each viewer's own. With one goroutine each, a decision on a
// window 10,000 viewers watch made 10,000 goroutines runnable at once, and
// everything a check needs the CPU for (its HTTP request, the limiter's
// batch, the Redis client's reads) queued behind them: checks ran past their
// timeout and were answered 503 while viewers were fed. Writers never
// outnumber the cores (GOMAXPROCS) and let other goroutines run after each
// viewer, so a check waits for a write or two, however many viewers there
// are; a viewer with several messages waiting gets them in one frame.
//
// A write that blocks (a viewer that reads slowly, or not at all) uses no
// CPU: after slowWrite its writer gives up its place to a new one, so viewers
// that do not read never hold the others back; the write itself still ends
// at writeTimeout at the latest (stream.watch).
const slowWrite = 20 * time.Millisecond

// writers is the pool: a queue of streams with messages waiting, and the
// writers draining it, started when there is work and gone when there is none.
type writers struct {
	max int // writers counted at once: not counting those stuck in a slow write

	mu     sync.Mutex
	queue  []*stream // queue[head:] wait for a writer, in the order they were woken
	head   int
	active int // writers counted against max
}

// keepWriteQueue is the most queue slots an empty queue keeps for the next
// burst; a larger one is let go, so memory returns after a crowd leaves.
const keepWriteQueue = 1024

func newWriters(max int) *writers {
	if max < 1 {
		max = runtime.GOMAXPROCS(0)
	}
	return &writers{max: max}
}

// schedule queues s for a writer, starting one when fewer than max run.
func (ws *writers) schedule(s *stream) {
	ws.mu.Lock()
	if ws.head > 0 && len(ws.queue) == cap(ws.queue) {
		// A queue that never empties (writers always behind) would keep
		// the slots before head and copy them on every growth: reuse them.
		n := copy(ws.queue, ws.queue[ws.head:])
		clear(ws.queue[n:])
		ws.queue, ws.head = ws.queue[:n], 0
	}
	ws.queue = append(ws.queue, s)
	start := ws.active < ws.max
	if start {
		ws.active++
	}
	ws.mu.Unlock()
	if start {
		go ws.work()
	}
}

// work writes what waits for the queued streams until none is left.
func (ws *writers) work() {
	var small [8][]byte // most frames carry a message or two
	for s := ws.next(); s != nil; s = ws.next() {
		if !s.flush(small[:0]) && !ws.rejoin() {
			return // gave up its place in a slow write, and the places are taken
		}
		runtime.Gosched() // let a check's goroutines run between viewers
	}
}

// next is the stream to write next, or nil when none waits: the caller stops
// and no longer counts.
func (ws *writers) next() *stream {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.head == len(ws.queue) {
		if cap(ws.queue) > keepWriteQueue {
			ws.queue = nil
		} else {
			ws.queue = ws.queue[:0] // each slot was cleared as it was taken
		}
		ws.head = 0
		ws.active--
		return nil
	}
	s := ws.queue[ws.head]
	ws.queue[ws.head] = nil
	ws.head++
	return s
}

// stalled gives up the place of a writer whose write has taken slowWrite,
// and starts another writer when streams wait.
func (ws *writers) stalled() {
	ws.mu.Lock()
	ws.active--
	start := ws.head < len(ws.queue) && ws.active < ws.max
	if start {
		ws.active++
	}
	ws.mu.Unlock()
	if start {
		go ws.work()
	}
}

// rejoin takes a place again for a writer whose slow write has ended; false:
// the places are taken, and it stops.
func (ws *writers) rejoin() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.active < ws.max {
		ws.active++
		return true
	}
	return false
}
