package limiter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/ratescope/ratescope/internal/redisdata"
)

var (
	//go:embed recall.lua
	recallSrc    string
	recallScript = newScript(recallSrc)
)

// ErrNoEntry is returned by Recall for an id with no entry left in the log:
// it slid out and was evicted, was refunded, or never was.
var ErrNoEntry = errors.New("the log holds no entry of that id")

// Recalled is what the log still says of one allowed check (Recall), as a
// Decision would have said it when the check ran — as far as the log can
// tell: Decision.NowMs is the entry's score, each window rule's Count what
// the window held before it plus the check's cost, OldestMs the oldest of
// those (or the entry itself). Gaps name what it can no longer tell, and
// each makes the Decision's numbers less than certain.
type Recalled struct {
	Decision Decision
	// NowMs is Redis's clock when the log was read.
	NowMs int64
	// Gaps say what the log can no longer tell; empty when every number is
	// what the check saw (entries refunded since aside: the log forgets
	// them).
	Gaps []string
}

// Recall rebuilds what the log says of the allowed check id of key under p
// (a log policy): ErrNoEntry when none of its entries is left,
// ErrInvalidID for an id that is no check's, ErrNotLog for another
// algorithm. Its calendar quotas kept no history: they are left out, and
// named in Gaps.
func (l *Limiter) Recall(ctx context.Context, key string, p Policy, id string) (Recalled, error) {
	if err := ValidateKey(key); err != nil {
		return Recalled{}, err
	}
	if err := ValidateID(id); err != nil {
		return Recalled{}, err
	}
	if p.AlgorithmName() != Log {
		return Recalled{}, ErrNotLog
	}
	args := []any{id}
	var longest int64
	for _, r := range p.Rules {
		if r.Period == "" {
			args = append(args, r.WindowMs())
			longest = max(longest, r.WindowMs())
		}
	}
	res, err := recallScript.Run(ctx, l.rdb, []string{redisdata.LogKey(key, p.Name)}, args...).Int64Slice()
	if err != nil {
		return Recalled{}, fmt.Errorf("failed to read the check's entries: %w", err)
	}
	if len(res) < 2 || res[1] < 0 {
		return Recalled{}, ErrNoEntry
	}
	if len(res) != 5+2*(len(args)-1) {
		return Recalled{}, fmt.Errorf("failed to read the recall script's reply: %d values", len(res))
	}
	at, own, ties, first := res[1], int(res[2]), res[3], res[4]
	rc := Recalled{NowMs: res[0]}
	d := Decision{
		Allowed: true, Key: key, Policy: p.Name, Algorithm: Log, Cost: own, NowMs: at, ID: id,
		Rules: make([]RuleState, 0, len(p.Rules)),
	}
	v := res[5:]
	for _, r := range p.Rules {
		if r.Period != "" {
			rc.Gaps = append(rc.Gaps, fmt.Sprintf("the %s quota (%d a %s) keeps one counter per period, no history: its count at the check is not known", r.Period, r.Limit, r.Period))
			continue
		}
		count, oldest := int(v[0])+own, v[1]
		v = v[2:]
		if oldest < 0 {
			oldest = at
		}
		w := r.WindowMs()
		d.Rules = append(d.Rules, RuleState{
			Limit: r.Limit, WindowMs: w, Count: count, Remaining: max(0, r.Limit-count),
			OldestMs: oldest, ResetMs: max(0, oldest+w-at),
		})
		// A check evicts entries scored ≤ its now − longest, the oldest
		// first: whatever was evicted since is scored ≤ now − longest and
		// ≤ first, the oldest entry left. The window lost nothing when no
		// such score lies inside it.
		if lost := min(rc.NowMs-longest, first); lost > at-w {
			rc.Gaps = append(rc.Gaps, fmt.Sprintf("entries of the %d ms window scored in (%d, %d] may have been evicted since (the log keeps the last %d ms, and its oldest entry left is at %d): its count %d is a lower bound",
				w, at-w, lost, longest, first, count))
		}
	}
	switch {
	case ties < 0:
		rc.Gaps = append(rc.Gaps, "more entries than the read bound share its millisecond: the counts are a guess")
	case ties > 0:
		rc.Gaps = append(rc.Gaps, fmt.Sprintf("%d entries of other checks share its millisecond; the log keeps no order among them, so they are counted as before it", ties))
	}
	if at > rc.NowMs {
		rc.Gaps = append(rc.Gaps, "its score is after now: a booked slot not reached yet, so the windows are counted at that slot")
	}
	d.Binding = binding(d)
	rc.Decision = d
	return rc, nil
}
