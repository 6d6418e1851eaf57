package limiter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
)

// Concurrency leases: a policy LIMIT/inflight limits requests in flight
// rather than requests per window. A request acquires a lease before its
// work and releases it after; at most LIMIT are live at once. Leases live in
// the window's sorted set, scored by their expiry on Redis's clock, so a
// holder that crashes frees its slot when its lease ends, and one script
// run decides each call — exact across any number of instances.

// InFlight is the algorithm of a policy whose one rule is LIMIT/inflight:
// it keeps leases, not windows. It is not among Algorithms, which keep
// windows (the lab compares those); checks of such a policy fail with
// ErrInFlight.
const InFlight Algorithm = "inflight"

// inFlightRule is what a rule names instead of a window: "4/inflight".
const inFlightRule = "inflight"

// Bounds of an inflight policy: its limit, and how long a lease lasts
// unless renewed (Policy.Lease; DefaultLease when the policy names none):
// from a second — shorter, and a holder's renewals would race its expiry —
// to a day, as a lock's; work longer than that renews.
const (
	MaxInFlight  = 100_000
	DefaultLease = 30 * time.Second
	MinLease     = time.Second
	MaxLease     = 24 * time.Hour
)

var (
	//go:embed lease.lua
	leaseSrc string
	//go:embed lease_acquire.lua
	acquireSrc string
	//go:embed lease_renew.lua
	renewSrc string
	//go:embed lease_release.lua
	releaseSrc string
	//go:embed lease_window.lua
	leaseWindowSrc string

	acquireScript     = newScript(leaseSrc + acquireSrc)
	renewScript       = newScript(leaseSrc + renewSrc)
	releaseScript     = newScript(leaseSrc + releaseSrc)
	leaseWindowScript = newScript(leaseWindowSrc)
)

// ErrInFlight is returned by Allow, Peek and AllowEach for an inflight
// policy: it limits requests in flight, which a lease (Acquire) holds.
var ErrInFlight = errors.New("the policy limits requests in flight: acquire a lease instead of checking")

// ErrNotInFlight is returned by Acquire, Renew and Release for a policy
// that is not LIMIT/inflight.
var ErrNotInFlight = errors.New("leases need a policy of requests in flight, LIMIT/inflight")

// ErrInvalidLeaseID is returned for a lease id that is not one Acquire
// answers with.
var ErrInvalidLeaseID = errors.New("lease id must be the id an acquired lease answered with: a UUID such as 9b2f1c4e-3a5d-4e6f-8a7b-0c1d2e3f4a5b")

// InFlight reports whether p limits requests in flight (its rule is
// LIMIT/inflight): its requests take leases, not checks.
func (p Policy) InFlight() bool { return p.Algorithm == InFlight }

// ValidateLeaseID reports ErrInvalidLeaseID unless id has the form of a
// lease's id, the form Renew and Release take.
func ValidateLeaseID(id string) error {
	if !checkID.MatchString(id) {
		return ErrInvalidLeaseID
	}
	return nil
}

// parseInFlight settles what a LIMIT/inflight rule makes of a policy being
// parsed: its only rule, its algorithm InFlight, its lease time (default
// DefaultLease), and none of the options about windows.
func (p *Policy) parseInFlight(hasAlg bool) error {
	inflight := slices.ContainsFunc(p.Rules, func(r Rule) bool { return r.InFlight })
	switch {
	case !inflight && p.Algorithm == InFlight:
		return errors.New("@inflight takes one rule LIMIT/inflight (e.g. jobs=4/inflight), not windows or quotas")
	case !inflight && p.Lease > 0:
		return errors.New("+lease= applies to a LIMIT/inflight rule only, e.g. jobs=4/inflight+lease=45s")
	case !inflight:
		return nil
	case len(p.Rules) > 1:
		return errors.New("a LIMIT/inflight rule limits requests in flight and cannot be mixed with window or quota rules: give it a policy of its own")
	case hasAlg && p.Algorithm != InFlight:
		return fmt.Errorf("@%s: an inflight policy keeps leases, not windows; drop @%s", p.Algorithm, p.Algorithm)
	case p.Shadow:
		return errors.New("+shadow does not apply to an inflight policy: a lease is held or refused")
	case p.Lock > 0:
		return errors.New("+lock= does not apply to an inflight policy")
	case p.Timezone != "":
		return errors.New("+tz= does not apply to an inflight policy: it has no calendar quota")
	}
	p.Algorithm = InFlight
	if p.Lease == 0 {
		p.Lease = DefaultLease
	}
	return nil
}

// leaseTerms are p's limit of leases and its lease time, or
// ErrNotInFlight; a policy built by hand with no lease time gets
// DefaultLease.
func leaseTerms(p Policy) (int, time.Duration, error) {
	if !p.InFlight() || len(p.Rules) != 1 || !p.Rules[0].InFlight {
		return 0, 0, ErrNotInFlight
	}
	lease := p.Lease
	if lease == 0 {
		lease = DefaultLease
	}
	if lease < MinLease || lease > MaxLease || p.Rules[0].Limit < 1 {
		return 0, 0, fmt.Errorf("failed to take policy %q's terms: limit %d, lease %v", p.Name, p.Rules[0].Limit, lease)
	}
	return p.Rules[0].Limit, lease, nil
}

// Lease is the answer to Acquire, Renew or Release: what the call did to
// one lease, and the policy's leases after it, on Redis's clock.
//
// Example: jobs=2/inflight+lease=30s, one lease live until t=40000, now
// t=20000. Acquire: Held, a new ID, InFlight 2, ExpiresMs 50000. Acquire
// again: not Held, InFlight 2, RetryAfterMs 20000 — at t=40000 the first
// lease ends unless renewed, and its holder may release it sooner. Renew of
// the first at t=35000: Held, ExpiresMs 65000. Release of it: Released,
// InFlight 1; released again: nothing changes, Released false.
type Lease struct {
	Key, Policy string
	// ID is the lease's id, a UUID v4: Acquire's new one when it was
	// granted ("" when refused), the one Renew or Release was given.
	ID string
	// Held reports that the lease is live after the call: Acquire granted
	// it, or Renew found it live and extended it. Renew answers false for
	// a lease that already expired or was released: it is gone.
	Held bool
	// Released reports that Release found the lease live and removed it;
	// false when it was gone already (expired, released before), which
	// changes nothing.
	Released bool
	// InFlight is how many leases are live after the call; Limit the most
	// that may be.
	InFlight int
	Limit    int
	// NowMs is Redis's clock when the script ran; a new or renewed lease
	// expires at ExpiresMs, NowMs plus the policy's lease time.
	NowMs     int64
	ExpiresMs int64
	// RetryAfterMs is, for a refused Acquire, the time until the earliest
	// live lease expires: an upper bound, as its holder may release it
	// sooner. 0 otherwise.
	RetryAfterMs int64
	// Expired are the leases the call found expired and removed (at most
	// redisdata.MaxEvict per call): their holders never released them in
	// time. Each expired lease is reported once, by the call that removed
	// it.
	Expired []ExpiredLease
}

// ExpiredLease is a lease removed because its time ran out.
type ExpiredLease struct {
	ID        string // "" for a member of the set that is no lease id
	ExpiresMs int64
}

// LiveLease is one live lease of a window (Window.Leases): StartMs is when
// it was acquired or last renewed (its expiry less the policy's lease
// time).
type LiveLease struct {
	ID                 string
	StartMs, ExpiresMs int64
}

// leaseCall names which of the three scripts a call runs.
type leaseCall int

const (
	acquireCall leaseCall = iota
	renewCall
	releaseCall
)

// Acquire takes a lease for key under p, an inflight policy, when fewer than
// its limit are live: Held, with the new lease's ID and ExpiresMs. Else it
// is refused (not Held) with the time until the earliest live lease expires.
// Exact under any concurrency, across instances.
func (l *Limiter) Acquire(ctx context.Context, key string, p Policy) (Lease, error) {
	return l.lease(ctx, acquireCall, key, p, uuid.NewString())
}

// Renew extends the live lease id to the policy's lease time from now
// (Held); a lease that expired or was released stays gone (not Held).
func (l *Limiter) Renew(ctx context.Context, key string, p Policy, id string) (Lease, error) {
	if err := ValidateLeaseID(id); err != nil {
		return Lease{}, err
	}
	return l.lease(ctx, renewCall, key, p, id)
}

// Release gives the lease id back, freeing its slot at once: idempotent, a
// lease already gone is no error (Released false).
func (l *Limiter) Release(ctx context.Context, key string, p Policy, id string) (Lease, error) {
	if err := ValidateLeaseID(id); err != nil {
		return Lease{}, err
	}
	return l.lease(ctx, releaseCall, key, p, id)
}

func (l *Limiter) lease(ctx context.Context, kind leaseCall, key string, p Policy, id string) (Lease, error) {
	if err := ValidateKey(key); err != nil {
		return Lease{}, err
	}
	limit, lease, err := leaseTerms(p)
	if err != nil {
		return Lease{}, err
	}
	script := [...]*redis.Script{acquireScript, renewScript, releaseScript}[kind]
	res, err := l.eval(ctx, 0, script, []string{redisdata.LogKey(key, p.Name)},
		[]any{id, lease.Milliseconds(), limit, redisdata.MaxEvict})
	if err == nil && (len(res) < 5 || int64(len(res)) != 5+5*res[4]) {
		err = fmt.Errorf("%d values", len(res))
	}
	if err != nil {
		return Lease{}, fmt.Errorf("failed to run the lease script: %w", err)
	}
	out := Lease{Key: key, Policy: p.Name, ID: id, Limit: limit, NowMs: res[1], InFlight: int(res[2])}
	ok := res[0] == 1
	switch kind {
	case acquireCall:
		out.Held = ok
		if ok {
			out.ExpiresMs = res[3]
		} else {
			out.ID, out.RetryAfterMs = "", res[3]
		}
	case renewCall:
		out.Held = ok
		if ok {
			out.ExpiresMs = res[3]
		}
	case releaseCall:
		out.Released = ok
	}
	for v := res[5:]; len(v) >= 5; v = v[5:] {
		out.Expired = append(out.Expired, ExpiredLease{ID: leaseIDOf(v[:4]), ExpiresMs: v[4]})
	}
	return out, nil
}

// leaseIDOf reassembles a lease id from the four 32-bit parts the scripts
// report it in; "" when they mark a member that is no lease id.
func leaseIDOf(v []int64) string {
	for _, n := range v {
		if n < 0 || n > 0xffffffff {
			return ""
		}
	}
	hex := fmt.Sprintf("%08x%08x%08x%08x", v[0], v[1], v[2], v[3])
	return hex[:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:]
}

// leaseAlgorithm is the seam's view of an inflight policy: it decides no
// checks (ErrInFlight) and reads its window as the live leases.
type leaseAlgorithm struct{}

func (leaseAlgorithm) countsDenied() bool { return false }

func (leaseAlgorithm) allow(context.Context, *Limiter, time.Duration, string, Policy, int, bool) (Decision, []int64, error) {
	return Decision{}, nil, ErrInFlight
}

// prepare is never sent: AllowEach refuses an inflight policy first.
func (leaseAlgorithm) prepare(key string, p Policy, _ int, _ bool, _ quotaCall) prepared {
	return prepared{keys: []string{redisdata.LogKey(key, p.Name)}, decide: func([]int64) (Decision, []int64, error) {
		return Decision{}, nil, ErrInFlight
	}}
}

func (leaseAlgorithm) look(key string, p Policy, _ quotaCall) lookup {
	limit, lease, _ := leaseTerms(p) // a policy ParsePolicy made has them
	return lookup{
		script: leaseWindowScript,
		keys:   []string{redisdata.LogKey(key, p.Name)},
		args:   []any{MaxSnapshot},
		read: func(reply any) (Window, error) {
			raw, ok := reply.([]any)
			if !ok || len(raw) != 4 {
				return Window{}, fmt.Errorf("failed to read the leases script's reply: %T", reply)
			}
			now, _ := raw[0].(int64)
			pairs, _ := raw[1].([]any)
			count, _ := raw[2].(int64)
			last, _ := raw[3].(int64)
			w := Window{Key: key, Policy: p.Name, Algorithm: InFlight, NowMs: now, Entries: []Entry{}, Leases: make([]LiveLease, 0, len(pairs)/2)}
			for i := 0; i+1 < len(pairs); i += 2 {
				id, _ := pairs[i].(string)
				score, _ := pairs[i+1].(string)
				var ms float64
				if _, err := fmt.Sscan(score, &ms); err != nil {
					return Window{}, fmt.Errorf("failed to read lease expiry %q: %w", score, err)
				}
				w.Leases = append(w.Leases, LiveLease{ID: id, StartMs: int64(ms) - lease.Milliseconds(), ExpiresMs: int64(ms)})
			}
			r := RuleState{Limit: limit, WindowMs: lease.Milliseconds(), Count: int(count), Remaining: max(0, limit-int(count)), OldestMs: -1}
			if last > now {
				r.ResetMs = last - now
			}
			w.Rules = []RuleState{r}
			return w, nil
		},
	}
}
