package limiter

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Window returns a snapshot of key's state under p on Redis's clock.
func (l *Limiter) Window(ctx context.Context, key string, p Policy) (Window, error) {
	if err := ValidateKey(key); err != nil {
		return Window{}, err
	}
	q, err := l.quotaCall(key, p)
	if err != nil {
		return Window{}, err
	}
	lk := algorithmOf(p).look(key, p, q)
	reply, err := lk.script.Run(ctx, l.rdb, lk.keys, lk.args...).Result()
	if err != nil {
		return Window{}, fmt.Errorf("failed to read the window: %w", err)
	}
	return finishWindow(lk, reply, p)
}

// WindowOf names one window to read: a client key under a policy.
type WindowOf struct {
	Key    string
	Policy Policy
}

// Windows reads many windows as Window does, in one pipeline (a cluster
// client sends one per node): a live view of thousands of windows reads them
// in a few round trips, not one each. The answers come in the order of ws;
// errs[i] is what Window would have answered for ws[i], nil when it was read.
func (l *Limiter) Windows(ctx context.Context, ws []WindowOf) (out []Window, errs []error) {
	out, errs = make([]Window, len(ws)), make([]error, len(ws))
	lks := make([]lookup, len(ws))
	var todo []int
	for i, w := range ws {
		if errs[i] = ValidateKey(w.Key); errs[i] != nil {
			continue
		}
		q, err := l.quotaCall(w.Key, w.Policy)
		if errs[i] = err; err == nil {
			lks[i] = algorithmOf(w.Policy).look(w.Key, w.Policy, q)
			todo = append(todo, i)
		}
	}
	cmds := l.pipeLooks(ctx, lks, todo, false)
	var again, at []int // scripts Redis had not cached (a restart), sent in full; their place in cmds
	for j, i := range todo {
		if isNoScript(cmds[j].Err()) {
			again, at = append(again, i), append(at, j)
		}
	}
	if len(again) > 0 {
		for k, c := range l.pipeLooks(ctx, lks, again, true) {
			cmds[at[k]] = c
		}
	}
	for j, i := range todo {
		reply, err := cmds[j].Result()
		if err != nil {
			errs[i] = fmt.Errorf("failed to read the window: %w", err)
			continue
		}
		out[i], errs[i] = finishWindow(lks[i], reply, ws[i].Policy)
	}
	return out, errs
}

// pipeLooks sends the lookups lks[idx…] as one pipeline; full sends each
// script's source (EVAL) instead of its hash.
func (l *Limiter) pipeLooks(ctx context.Context, lks []lookup, idx []int, full bool) []*redis.Cmd {
	pipe := l.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(idx))
	for j, i := range idx {
		cmds[j] = queueScript(ctx, pipe, lks[i].script, lks[i].keys, lks[i].args, full)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	return cmds
}

// finishWindow reads a lookup's reply and fills the top-level figures from
// the longest window rule — or, for a policy of quotas alone, the first
// quota (its WindowMs is 0).
func finishWindow(lk lookup, reply any, p Policy) (Window, error) {
	w, err := lk.read(reply)
	if err != nil {
		return Window{}, err
	}
	longest := 0
	for i, r := range w.Rules {
		if r.WindowMs > w.Rules[longest].WindowMs {
			longest = i
		}
	}
	lr := w.Rules[longest]
	w.Count, w.Limit, w.WindowMs = lr.Count, lr.Limit, lr.WindowMs
	w.Truncated = lr.Period == "" && w.Count > len(w.Entries) && p.AlgorithmName() == Log
	if p.InFlight() {
		w.Truncated = w.Count > len(w.Leases)
	}
	return w, nil
}

// Entry is one recorded request in a log.
type Entry struct {
	ID string // the ZSET member
	Ms int64  // its score: arrival on Redis's clock
}

// Window is a snapshot of one client's state under a policy, taken without
// consuming anything. Every algorithm fills Count and Limit (and each rule's
// Count and Remaining), so a page can draw "used / limit" for any policy;
// the log adds its entries, the others their per-rule state in Rules.
type Window struct {
	Key       string
	Policy    string
	Algorithm Algorithm
	// Entries are, for the log, those inside the longest window, oldest
	// first, at most MaxSnapshot of them; empty for the other algorithms.
	Entries []Entry
	// Leases are, for an inflight policy (whose Entries are empty), the
	// live leases, the earliest expiry first, at most MaxSnapshot of them;
	// its Count is how many are live, its WindowMs the lease time.
	Leases    []LiveLease
	Truncated bool
	// Count is the longest window's Count: for the log, the true number of
	// entries inside it.
	Count    int
	Limit    int // the longest window's limit
	WindowMs int64
	NowMs    int64
	// Rules holds each rule's state, in the policy's order.
	Rules []RuleState
}
