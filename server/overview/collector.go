package overview

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// What an instance keeps of each policy's traffic: per second, how many
// checks were allowed, denied, would-denied (a shadow policy) and answered
// by the deny cache, for the last Seconds; and per bucket of BucketMs, the
// heaviest keys by checks and by denials in two Space-Saving summaries of
// Counters each. The top lists cover the last Buckets buckets — the
// current one and those before it: the last minute, in steps of BucketMs.
const (
	Seconds  = 60
	Counters = 256
	BucketMs = 10_000
	Buckets  = 6

	secondRing = 64 // > Seconds, so the second being filled never overwrites one read
)

// Collector counts every decision of the policies it tracks, on the check's
// goroutine: a map lookup, a lock no other check of that policy holds for
// long, and no Redis. It is an httplimit.Observer of the Checker.
type Collector struct {
	policies atomic.Pointer[map[string]*policyCounts] // replaced whole by Track
	mu       sync.Mutex                               // one Track at a time
	k        int
}

// NewCollector returns a Collector with Counters counters per summary.
func NewCollector() *Collector { return newCollector(Counters) }

func newCollector(k int) *Collector {
	c := &Collector{k: k}
	c.policies.Store(&map[string]*policyCounts{})
	return c
}

// Track sets the policies counted: those in force. A policy already counted
// keeps its counts; a policy no longer named is forgotten.
func (c *Collector) Track(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.policies.Load()
	same := len(old) == len(names)
	for _, n := range names {
		if _, ok := old[n]; !ok {
			same = false
		}
	}
	if same {
		return
	}
	m := make(map[string]*policyCounts, len(names))
	for _, n := range names {
		if pc := old[n]; pc != nil {
			m[n] = pc
		} else {
			m[n] = &policyCounts{k: c.k}
		}
	}
	c.policies.Store(&m)
}

func (c *Collector) policy(name string) *policyCounts { return (*c.policies.Load())[name] }

// Started does nothing: only decisions are counted.
func (*Collector) Started(httplimit.Target) {}

// Finished does nothing: a check Redis failed made no decision to count.
func (*Collector) Finished(httplimit.Target, httplimit.Result, time.Duration) {}

// Decided counts d in its policy's second and bucket, by Redis's clock.
func (c *Collector) Decided(d limiter.Decision) {
	pc := c.policy(d.Policy)
	if pc == nil {
		return
	}
	ms := d.NowMs
	if ms <= 0 {
		ms = time.Now().UnixMilli()
	}
	pc.add(d, ms)
}

// policyCounts are one policy's counts.
type policyCounts struct {
	k       int
	mu      sync.Mutex
	seconds [secondRing]second
	buckets [Buckets]bucket
}

// second holds one second's decisions by outcome. Denied counts the
// denials of an enforced policy, cached ones included; Cached counts those
// the deny cache answered; ShadowDenied a shadow policy's would-denies.
type second struct {
	at                                    int64 // which second (Unix)
	allowed, denied, shadowDenied, cached int64
}

// bucket holds one BucketMs of top keys: by checks (tallying each key's
// denials while it holds a counter) and by denials — a shadow policy's
// would-denials.
type bucket struct {
	at      int64 // which bucket: ms / BucketMs
	checks  *summary
	denials *summary
}

func (p *policyCounts) add(d limiter.Decision, ms int64) {
	sec, at := ms/1000, ms/BucketMs
	denied := !d.Allowed
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := &p.seconds[sec%secondRing]; s.at <= sec {
		if s.at != sec {
			*s = second{at: sec}
		}
		switch {
		case d.Allowed:
			s.allowed++
		case d.Shadow:
			s.shadowDenied++
		default:
			s.denied++
			if d.Cached {
				s.cached++
			}
		}
	}
	b := &p.buckets[at%Buckets]
	if b.at > at {
		return // older than anything kept
	}
	if b.checks == nil {
		b.checks, b.denials = newSummary(p.k), newSummary(p.k)
	}
	if b.at != at {
		b.at = at
		b.checks.reset()
		b.denials.reset()
	}
	b.checks.add(d.Key, denied)
	if denied {
		b.denials.add(d.Key, false)
	}
}
