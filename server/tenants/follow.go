package tenants

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// How Run follows changes. After followIdle without a message it pings, and
// a ping unanswered for another followIdle means the subscription is gone;
// resubscribing backs off from resubscribeMin to resubscribeMax. Every
// checkEvery it compares each policy's version with Redis's, re-reading the
// hashes that differ: an announcement lost with a connection costs at most
// that long.
const (
	followIdle     = 500 * time.Millisecond
	resubscribeMin = 100 * time.Millisecond
	resubscribeMax = 10 * time.Second
	checkEvery     = 30 * time.Second
	// retryRead is how soon a read that failed is tried again.
	retryRead = time.Second
)

// Run keeps the Store current until ctx ends: it subscribes to the
// announcements of every change, reads every policy's hash whole each time
// the subscription is (re)confirmed — the first time included, so an
// instance starts with what Redis holds — applies each announcement as it
// arrives, and every 30 s (or on Refresh) re-reads the hashes whose version
// differs from what it holds. While Redis is unreachable the Store keeps
// what it last read. An outage logs one line when it starts and one when it
// ends, never one per attempt.
func (s *Store) Run(ctx context.Context) {
	wait := resubscribeMin
	for {
		up, err := s.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if up {
			wait = resubscribeMin
		}
		if up || !s.down {
			s.down = true
			s.deps.Log.Warn("lost the overrides' announcements; resubscribing until Redis answers", "err", err)
		} else {
			s.deps.Log.Debug("could not subscribe to the overrides' announcements", "in", wait.String(), "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, resubscribeMax)
	}
}

// follow holds one subscription until it fails or ctx ends; up reports
// whether it was ever confirmed.
func (s *Store) follow(ctx context.Context) (up bool, err error) {
	ps := s.deps.Redis.Subscribe(ctx, s.channel)
	defer ps.Close()
	// A blocked receive does not watch ctx; closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	pinged := false
	var checked time.Time
	for {
		if up {
			select {
			case <-s.poke:
				checked = time.Time{}
			default:
			}
			if time.Since(checked) >= checkEvery {
				checked = s.reread(ctx, false)
			}
		}
		msg, err := ps.ReceiveTimeout(ctx, followIdle)
		if ctx.Err() != nil {
			return up, ctx.Err()
		}
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() && !pinged {
			pctx, cancel := context.WithTimeout(ctx, followIdle)
			err = ps.Ping(pctx)
			cancel()
			pinged = true
			if err == nil {
				continue
			}
		}
		if err != nil {
			return up, err
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				// Announcements may have been missed while it was down.
				up, checked = true, s.reread(ctx, true)
				if s.down {
					s.down = false
					s.deps.Log.Info("following the overrides' announcements again")
				}
			}
		case *redis.Message:
			if version, policy, field, value, ok := parseMessage(m.Payload); ok {
				s.announced(version, policy, field, value)
			}
		}
	}
}

// announced applies a change another instance (or this one) made.
func (s *Store) announced(version, policy, field, value string) {
	if value == "" {
		s.applyChange(version, policy, field, nil)
		return
	}
	o, err := decode(policy, field, value)
	if err != nil {
		s.deps.Log.Warn("ignored an override announced in a form this version cannot read", "policy", policy, "err", err)
		return
	}
	s.applyChange(version, policy, field, &o)
}

// applyChange sets (o) or removes (nil) the override in field of policy's
// set, which Redis now holds at version, and tells Changed.
func (s *Store) applyChange(version, policy, field string, o *Override) {
	prefix := len(field) >= len(prefixField) && field[:len(prefixField)] == prefixField
	value := field[len(keyField):]
	if prefix {
		value = field[len(prefixField):]
	}
	var e *entry
	if o != nil {
		e = &entry{o: *o}
	}
	s.apply(func(cur map[string]*policySet) map[string]*policySet {
		ps := cur[policy]
		if ps == nil {
			ps = newPolicySet("", newTable())
		}
		return setPolicy(cur, policy, ps.with(version, prefix, value, e))
	})
	if prefix {
		s.changed(policy, "")
	} else {
		s.changed(policy, value)
	}
}

// reread re-reads the hashes of the policies in force: all of them (all),
// or those whose version differs from the one held. A set held for a
// policy no longer in force is dropped. It returns when to count the next
// check from: now, or — when a read failed — so that it comes in
// retryRead.
func (s *Store) reread(ctx context.Context, all bool) (checked time.Time) {
	retry := time.Now().Add(retryRead - checkEvery)
	policies := s.deps.Policies()
	versions, err := s.versions(ctx, policies)
	if err != nil {
		s.deps.Log.Warn("could not check the overrides in Redis; keeping those held", "err", err)
		return retry
	}
	checked = time.Now()
	for i, policy := range policies {
		held := s.snap.Load().policies[policy]
		switch {
		case versions[i] == "" && held == nil:
			continue
		case !all && held != nil && held.version == versions[i]:
			continue
		}
		ps, bad, err := s.readPolicy(ctx, policy)
		if err != nil {
			s.deps.Log.Warn("could not read the overrides of a policy; keeping those held", "policy", policy, "err", err)
			checked = retry
			continue
		}
		if bad > 0 {
			s.deps.Log.Warn("left out overrides this version cannot read", "policy", policy, "count", bad)
		}
		s.apply(func(cur map[string]*policySet) map[string]*policySet { return setPolicy(cur, policy, ps) })
		s.changed(policy, "")
	}
	inForce := make(map[string]bool, len(policies))
	for _, p := range policies {
		inForce[p] = true
	}
	s.apply(func(cur map[string]*policySet) map[string]*policySet {
		for name := range cur {
			if !inForce[name] {
				cur = setPolicy(cur, name, nil)
			}
		}
		return cur
	})
	if checked != retry {
		s.syncs.Add(1)
	}
	return checked
}
