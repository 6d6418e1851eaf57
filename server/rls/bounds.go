package rls

import (
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The bounds of one request. Envoy's configuration decides the shape of
// what it sends — one descriptor per rate_limits action that applied, one
// entry per action, keys named in the configuration — so a request beyond
// them is a misconfiguration or not Envoy, and is refused with
// InvalidArgument before anything is counted. A value is the client's (a
// header, an address, a path): it is never refused, see MaxValueLen.
const (
	// MaxDescriptors bounds the descriptors of one request: a request with
	// more is refused rather than turned into that many Redis calls.
	MaxDescriptors = 64
	// MaxEntries bounds the entries of one descriptor (Envoy sends a
	// handful), so a request's keys and names cost what a handful costs.
	MaxEntries = 32
	// MaxNameLen bounds the domain and each entry's key, in bytes: both are
	// names from Envoy's configuration (generic_key, remote_address…).
	MaxNameLen = 256
	// MaxValueLen bounds an entry's value, in bytes: 64 KiB, above the
	// 60 KiB of headers Envoy takes from a client by default. A value is
	// the client's, and Envoy lets a request through when its call fails,
	// so a longer value is not an error: a descriptor holding one is
	// OVER_LIMIT where a limit applies (nothing is recorded), and OK where
	// none does. Values up to it are hashed into keys like any value over
	// 64 bytes.
	MaxValueLen = 64 << 10
)

// checkBounds refuses a request beyond the bounds, naming the field.
func checkBounds(req *rlsv3.RateLimitRequest) error {
	if n := len(req.GetDomain()); n > MaxNameLen {
		return fmt.Errorf("domain: %d bytes, at most %d are taken", n, MaxNameLen)
	}
	ds := req.GetDescriptors()
	if len(ds) > MaxDescriptors {
		return fmt.Errorf("descriptors: %d given, at most %d are taken", len(ds), MaxDescriptors)
	}
	for i, d := range ds {
		es := d.GetEntries()
		if len(es) > MaxEntries {
			return fmt.Errorf("descriptors[%d].entries: %d given, at most %d are taken", i, len(es), MaxEntries)
		}
		for j, e := range es {
			if n := len(e.GetKey()); n > MaxNameLen {
				return fmt.Errorf("descriptors[%d].entries[%d].key: %d bytes, at most %d are taken", i, j, n, MaxNameLen)
			}
		}
	}
	return nil
}

// overlong reports whether one of d's values is longer than MaxValueLen.
func overlong(d *ratelimitv3.RateLimitDescriptor) bool {
	for _, e := range d.GetEntries() {
		if len(e.GetValue()) > MaxValueLen {
			return true
		}
	}
	return false
}
