package limiter

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ErrSharedKeys is returned by AllowEach for policies whose state would share
// a Redis key: two of them with the same name and algorithm.
var ErrSharedKeys = errors.New("policies must differ in name or algorithm")

// AllowEach decides one request of the given cost for key under each policy
// in ps, in one MULTI/EXEC round trip: the scripts run back to back, with no
// other command between them, so every policy sees the same traffic at the
// same moment (each script still reads Redis's clock itself; they run within
// microseconds). It is what the lab needs to compare algorithms on one
// request: e.g. the five policies lab=5/10s@log … lab=5/10s@bucket.
//
// Every policy's state shares key's hash tag, so the transaction is valid on
// a cluster. The local deny cache is neither asked nor fed. The decisions
// come back in the order of ps.
func (l *Limiter) AllowEach(ctx context.Context, key string, ps []Policy, cost int) ([]Decision, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	calls := make([]prepared, len(ps))
	seen := make(map[string]bool, len(ps))
	for i, p := range ps {
		if p.InFlight() {
			return nil, ErrInFlight
		}
		if !p.CostFits(cost) {
			return nil, ErrInvalidCost
		}
		q, err := l.quotaCall(key, p)
		if err != nil {
			return nil, err
		}
		calls[i] = algorithmOf(p).prepare(key, p, cost, false, q)
		if seen[calls[i].keys[0]] {
			return nil, ErrSharedKeys
		}
		seen[calls[i].keys[0]] = true
	}
	cmds, err := l.multi(ctx, calls, false)
	if err != nil {
		return nil, err
	}
	// A script Redis had not cached did not run (NOSCRIPT fails only its own
	// command inside EXEC): send those again in full, alone. They see a
	// slightly later moment, which only a Redis restart causes.
	var again []prepared
	var idx []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			again, idx = append(again, calls[i]), append(idx, i)
		}
	}
	if len(again) > 0 {
		redo, err := l.multi(ctx, again, true)
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			cmds[i] = redo[j]
		}
	}
	out := make([]Decision, len(ps))
	for i, c := range cmds {
		res, err := c.Int64Slice()
		if err != nil {
			return nil, fmt.Errorf("failed to run the %s script: %w", ps[i].AlgorithmName(), err)
		}
		d, _, err := calls[i].decide(res)
		if err != nil {
			return nil, err
		}
		d.Shadow = ps[i].Shadow
		out[i] = d
	}
	return out, nil
}

// multi sends calls as one MULTI/EXEC; full sends each script's source (EVAL)
// instead of its hash.
func (l *Limiter) multi(ctx context.Context, calls []prepared, full bool) ([]*redis.Cmd, error) {
	tx := l.rdb.TxPipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = queueScript(ctx, tx, c.script, c.keys, c.args, full)
	}
	_, err := tx.Exec(ctx)
	if err != nil && !isNoScript(err) && !anyNoScript(cmds) {
		return nil, fmt.Errorf("failed to run the scripts: %w", err)
	}
	return cmds, nil
}

func anyNoScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if isNoScript(c.Err()) {
			return true
		}
	}
	return false
}
