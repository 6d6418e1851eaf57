package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// MaxDescriptors bounds the descriptors of one request. Envoy sends one per
// rate_limits action that applied, a handful; a request with more is refused
// rather than turned into that many Redis calls.
const MaxDescriptors = 64

// maxKeyPart is the longest descriptor value used in a client key as it is;
// a longer one is hashed, as forward auth hashes its key sources (SPEC §7).
const maxKeyPart = 64

// check is one descriptor translated: the limiter call it asks for, or
// nothing when it maps to no policy.
type check struct {
	key    string
	policy *httplimit.Policy // nil: unmapped
	cost   int
	// orphan names the policy a mapping points at when no such policy is
	// configured: a reload between reading the mappings and the policies.
	// The descriptor is treated as unmapped, as the new config says.
	orphan string
}

func (c check) mapped() bool { return c.policy != nil }

// translate turns a request into one check per descriptor, in the request's
// order, or the first reason it is malformed, naming the field:
//   - domain must be set and descriptors given (at most MaxDescriptors),
//     each with at least one entry, each entry with a key;
//   - a descriptor maps when its entries' keys equal a mapping's Keys in
//     order, within the request's domain;
//   - the client key is its entries' values in order, joined with ":"; a
//     value outside the limiter's key alphabet or longer than 64 bytes is
//     replaced by "sha256:" and the first 32 hex digits of its SHA-256 (as
//     forward auth does), and a joined key longer than limiter.MaxKeyLen is
//     hashed whole the same way;
//   - the cost is the descriptor's hits_addend when set, else the request's,
//     and 0 means 1; for a mapped descriptor it must be from 1 to the
//     policy's smallest limit, as for the HTTP check;
//   - is_negative_hits is refused: a log records requests and cannot take
//     them back. A descriptor's own limit override is ignored: the policy
//     decides.
func translate(req *rlsv3.RateLimitRequest, maps []Mapping, lookup func(string) (*httplimit.Policy, bool)) ([]check, error) {
	domain := req.GetDomain()
	ds := req.GetDescriptors()
	switch {
	case domain == "":
		return nil, errors.New("domain: must not be empty; give the domain of the rate limit filter")
	case len(ds) == 0:
		return nil, errors.New("descriptors: give at least one")
	case len(ds) > MaxDescriptors:
		return nil, fmt.Errorf("descriptors: %d given, at most %d are taken", len(ds), MaxDescriptors)
	}
	out := make([]check, len(ds))
	keys := make([]string, 0, 4)
	values := make([]string, 0, 4)
	for i, d := range ds {
		entries := d.GetEntries()
		if len(entries) == 0 {
			return nil, fmt.Errorf("descriptors[%d].entries: give at least one", i)
		}
		if d.GetIsNegativeHits() {
			return nil, fmt.Errorf("descriptors[%d].is_negative_hits: not supported: a sliding-window log cannot take requests back", i)
		}
		keys, values = keys[:0], values[:0]
		for j, e := range entries {
			if e.GetKey() == "" {
				return nil, fmt.Errorf("descriptors[%d].entries[%d].key: must not be empty", i, j)
			}
			keys = append(keys, e.GetKey())
			values = append(values, e.GetValue())
		}
		name, ok := policyFor(maps, domain, keys)
		if !ok {
			continue
		}
		p, ok := lookup(name)
		if !ok {
			out[i].orphan = name
			continue
		}
		cost, err := costOf(req, d, i, p.Policy)
		if err != nil {
			return nil, err
		}
		out[i] = check{key: clientKey(values), policy: p, cost: cost}
	}
	return out, nil
}

// policyFor finds the policy of the first mapping in domain whose keys are
// exactly keys.
func policyFor(maps []Mapping, domain string, keys []string) (string, bool) {
	for _, m := range maps {
		if m.Domain == domain && slices.Equal(m.Keys, keys) {
			return m.Policy, true
		}
	}
	return "", false
}

// costOf reads a mapped descriptor's cost: its own hits_addend when set,
// else the request's; 0 means 1.
func costOf(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor, i int, p limiter.Policy) (int, error) {
	raw := uint64(req.GetHitsAddend())
	name := "hits_addend"
	if h := d.GetHitsAddend(); h != nil {
		raw, name = h.GetValue(), fmt.Sprintf("descriptors[%d].hits_addend", i)
	}
	if raw == 0 {
		raw = 1
	}
	hi := p.SmallestLimit()
	if raw > math.MaxInt32 || int(raw) > hi {
		return 0, fmt.Errorf("%s: %d is out of range for descriptors[%d] (policy %q takes 1 to %d)", name, raw, i, p.Name, hi)
	}
	return int(raw), nil
}

// clientKey joins a descriptor's values into a key the limiter takes.
func clientKey(values []string) string {
	var b strings.Builder
	for i, v := range values {
		if i > 0 {
			b.WriteByte(':')
		}
		if len(v) > maxKeyPart || limiter.ValidateKey(v) != nil {
			v = hashed(v)
		}
		b.WriteString(v)
	}
	if b.Len() > limiter.MaxKeyLen {
		return hashed(b.String())
	}
	return b.String()
}

// hashed stands in for a value that cannot be a key: "sha256:" and the first
// 32 hex digits of its SHA-256.
func hashed(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:16])
}
