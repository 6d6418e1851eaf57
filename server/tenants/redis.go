package tenants

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
)

// Where overrides live in Redis. HashKey(policy) is one hash per policy —
// one cluster slot, read whole with HSCAN — whose fields are keyField +
// <key> and prefixField + <prefix>, each holding the override as JSON
// ({"rules":[…],"note":"…","updatedMs":…}), and versionField, a token every
// change replaces so an instance can tell, with one HGET, whether it holds
// the hash as it is.
const (
	hashPrefix   = "ratescope:overrides:"
	keyField     = "key:"
	prefixField  = "prefix:"
	versionField = "version"
	// channelName announces every change, as
	// "<version>\n<policy>\n<field>\n<value>" (value empty: removed), on
	// classic Pub/Sub, which reaches every node of a cluster and the
	// embedded Redis alike; the database number is added (redisdb.Channel).
	channelName = "ratescope:overrides"
	// scanCount is how many fields one HSCAN asks for.
	scanCount = 1000
)

// HashKey is the hash holding policy's overrides: ratescope:overrides:<policy>.
func HashKey(policy string) string { return hashPrefix + policy }

// ErrFull is Put's error when the policy has MaxPerPolicy overrides already
// and the subject has none of them.
var ErrFull = fmt.Errorf("the policy has %d overrides, the most it may have; remove one first", MaxPerPolicy)

var (
	//go:embed set.lua
	setSource string
	//go:embed delete.lua
	deleteSource string

	setScript    = redis.NewScript(setSource)
	deleteScript = redis.NewScript(deleteSource)
)

// stored is an override's value in its hash.
type stored struct {
	Rules     []string `json:"rules"`
	Note      string   `json:"note"`
	UpdatedMs int64    `json:"updatedMs"`
}

// Put sets the override of who under policy to rules (checked by the caller
// with ParseRules) and note, in one script that also announces it, and
// applies it on this instance at once; the others apply it as the
// announcement arrives. ErrFull when the policy has no room for another.
func (s *Store) Put(ctx context.Context, policy string, who Subject, rules []string, note string) (Override, error) {
	head, err := json.Marshal(stored{Rules: rules, Note: note})
	if err != nil {
		return Override{}, fmt.Errorf("failed to encode the override: %w", err)
	}
	// {"rules":[…],"note":"…","updatedMs":0} up to its number, which the
	// script writes from Redis's clock.
	prefix := strings.TrimSuffix(string(head), "0}")
	field := fieldOf(who)
	version := uuid.NewString()
	res, err := setScript.Run(ctx, s.deps.Redis, []string{HashKey(policy)},
		field, prefix, version, MaxPerPolicy, s.channel, policy).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("%d values", len(res))
	}
	if err != nil {
		return Override{}, fmt.Errorf("failed to store the override: %w", err)
	}
	if ok, _ := res[0].(int64); ok != 1 {
		return Override{}, ErrFull
	}
	ms, _ := res[1].(string)
	value := prefix + ms + "}"
	o, err := decode(policy, field, value)
	if err != nil {
		return Override{}, err
	}
	s.applyChange(version, policy, field, &o)
	return o, nil
}

// Delete removes the override of who under policy, announcing it, and on
// this instance at once. It reports whether there was one.
func (s *Store) Delete(ctx context.Context, policy string, who Subject) (bool, error) {
	field := fieldOf(who)
	res, err := deleteScript.Run(ctx, s.deps.Redis, []string{HashKey(policy)}, field, uuid.NewString(), s.channel, policy).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("%d values", len(res))
	}
	if err != nil {
		return false, fmt.Errorf("failed to remove the override: %w", err)
	}
	if n, _ := res[0].(int64); n != 1 {
		return false, nil
	}
	version, _ := res[1].(string)
	s.applyChange(version, policy, field, nil)
	return true, nil
}

func fieldOf(who Subject) string {
	if who.isPrefix() {
		return prefixField + who.Prefix
	}
	return keyField + who.Key
}

// decode reads one field of policy's hash and its value; an error for
// anything a Put could not have written.
func decode(policy, field, value string) (Override, error) {
	o := Override{Policy: policy}
	switch {
	case strings.HasPrefix(field, keyField):
		o.Key = field[len(keyField):]
		if limiter.ValidateKey(o.Key) != nil {
			return o, fmt.Errorf("field %q: not a valid key", field)
		}
	case strings.HasPrefix(field, prefixField):
		o.Prefix = field[len(prefixField):]
		if ValidatePrefix(o.Prefix) != nil {
			return o, fmt.Errorf("field %q: not a valid prefix", field)
		}
	default:
		return o, fmt.Errorf("field %q: neither key: nor prefix:", field)
	}
	var v stored
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		return o, fmt.Errorf("field %q: %w", field, err)
	}
	if len(v.Rules) == 0 || len(v.Rules) > MaxRules {
		return o, fmt.Errorf("field %q: %d rules", field, len(v.Rules))
	}
	o.Rules, o.Note, o.UpdatedMs = v.Rules, v.Note, v.UpdatedMs
	return o, nil
}

// readPolicy reads policy's hash whole: its version first, so a change made
// while it scans shows as a version it does not hold yet (and as an
// announcement it applies after). version is "" when there is no hash.
// Fields it cannot read are counted in bad and left out.
func (s *Store) readPolicy(ctx context.Context, policy string) (ps *policySet, bad int, err error) {
	key := HashKey(policy)
	cctx, cancel := s.bound(ctx)
	version, err := s.deps.Redis.HGet(cctx, key, versionField).Result()
	cancel()
	if errors.Is(err, redis.Nil) {
		return newPolicySet("", newTable()), 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("failed to read the overrides' version of %s: %w", policy, err)
	}
	t := newTable()
	var cursor uint64
	for {
		cctx, cancel := s.bound(ctx)
		kv, next, err := s.deps.Redis.HScan(cctx, key, cursor, "", scanCount).Result()
		cancel()
		if err != nil {
			return nil, 0, fmt.Errorf("failed to read the overrides of %s: %w", policy, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == versionField {
				continue
			}
			o, err := decode(policy, kv[i], kv[i+1])
			if err != nil {
				bad++
				continue
			}
			t.side(o.Prefix != "")[subjectValue(o)] = &entry{o: o}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	return newPolicySet(version, t), bad, nil
}

func subjectValue(o Override) string {
	if o.Prefix != "" {
		return o.Prefix
	}
	return o.Key
}

// versions reads every named policy's version in one round trip: "" where
// there is no hash.
func (s *Store) versions(ctx context.Context, policies []string) ([]string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	pipe := s.deps.Redis.Pipeline()
	cmds := make([]*redis.StringCmd, len(policies))
	for i, p := range policies {
		cmds[i] = pipe.HGet(ctx, HashKey(p), versionField)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("failed to read the overrides' versions: %w", err)
	}
	out := make([]string, len(policies))
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("failed to read the overrides' versions: %w", err)
		}
		out[i] = v
	}
	return out, nil
}

// parseMessage reads an announcement; value is "" for a removal.
func parseMessage(payload string) (version, policy, field, value string, ok bool) {
	parts := strings.SplitN(payload, "\n", 4)
	if len(parts) != 4 {
		return "", "", "", "", false
	}
	return parts[0], parts[1], parts[2], parts[3], true
}
