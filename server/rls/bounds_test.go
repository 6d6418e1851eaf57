package rls_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/envoyconf"
	"github.com/ratescope/ratescope/server/rls"
)

// filesDomain is served from one file of envoyproxy/ratelimit's format.
const filesDomain = "files"

const boundsFile = `domain: files
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// serveFiles serves filesDomain from boundsFile beside the test mappings.
func serveFiles(t *testing.T) *harness {
	t.Helper()
	set, err := envoyconf.Parse([]envoyconf.File{{Name: "files.yaml", Data: []byte(boundsFile)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]*httplimit.Policy{}
	for _, p := range set.Policies() {
		policies[p.Name] = httplimit.Prepare(p)
	}
	return serve(t, redistest.URL(t), func(d *rls.Deps) {
		d.Files = func() *envoyconf.Set { return set }
		d.Policy = func(name string) (*httplimit.Policy, bool) {
			if p, ok := policies[name]; ok {
				return p, true
			}
			return prepared(name)
		}
	})
}

// entries is a descriptor of n entries, key i of keyLen bytes and value
// i of valueLen (or a little longer, to stay distinct by tag and i).
func entries(tag string, n, keyLen, valueLen int) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := range n {
		k := fmt.Sprintf("k%s-%d-", tag, i)
		v := fmt.Sprintf("v%s-%d-", tag, i)
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{
			Key:   k + strings.Repeat("k", max(0, keyLen-len(k))),
			Value: v + strings.Repeat("v", max(0, valueLen-len(v))),
		})
	}
	return d
}

func perMinute(n uint32, d *ratelimitv3.RateLimitDescriptor) *ratelimitv3.RateLimitDescriptor {
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: typev3.RateLimitUnit_MINUTE}
	return d
}

// TestRequestBounds: a request with more descriptors, entries, or longer
// domain or keys than the bounds gets InvalidArgument naming the field,
// quickly, on a domain of the mappings and of the files alike, and nothing
// is counted. A 64,000-entry call is refused, not keyed.
func TestRequestBounds(t *testing.T) {
	h := serveFiles(t)
	long := strings.Repeat("k", rls.MaxNameLen+1)
	descriptors := func(n int) []*ratelimitv3.RateLimitDescriptor {
		ds := make([]*ratelimitv3.RateLimitDescriptor, n)
		for i := range ds {
			ds[i] = descriptor("user=" + newValue())
		}
		return ds
	}
	for _, domain := range []string{"edge", filesDomain} {
		for _, tc := range []struct {
			name, field string
			req         *rlsv3.RateLimitRequest
		}{
			{"too many descriptors", "descriptors", &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descriptors(rls.MaxDescriptors + 1)}},
			{"too many entries", "descriptors[1].entries", &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
				descriptor("user=" + newValue()), entries("e", rls.MaxEntries+1, 8, 8)}}},
			{"64,000 entries", "descriptors[0].entries", &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
				perMinute(100, entries("x", 64_000, 8, 40))}}},
			{"a long key", "descriptors[0].entries[1].key", &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
				perMinute(100, descriptor("user="+newValue()+","+long+"=x"))}}},
		} {
			t.Run(domain+"/"+tc.name, func(t *testing.T) {
				start := time.Now()
				_, err := h.client.ShouldRateLimit(context.Background(), tc.req)
				if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
					t.Fatalf("got %v, want InvalidArgument about %s", err, tc.field)
				}
				if took := time.Since(start); took > 5*time.Second {
					t.Errorf("refused after %v, want at once", took)
				}
			})
		}
	}
	_, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: long, Descriptors: descriptors(1)})
	if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "domain:") {
		t.Fatalf("a long domain: %v, want InvalidArgument about domain", err)
	}
	if n := len(h.seen()); n != 0 {
		t.Errorf("requests beyond the bounds made %d decisions", n)
	}
}

// TestLargestRequest: a request at every bound — MaxDescriptors of
// MaxEntries entries each, keys of MaxNameLen bytes, values hashed — under
// a limit override on a files domain, is decided whole, every descriptor
// under the name the configuration gives (the domain and the window, not
// the request's keys), with keys the limiter takes.
func TestLargestRequest(t *testing.T) {
	h := serveFiles(t)
	req := &rlsv3.RateLimitRequest{Domain: filesDomain}
	for i := range rls.MaxDescriptors {
		req.Descriptors = append(req.Descriptors, perMinute(100, entries(fmt.Sprintf("%s-%d", newValue(), i), rls.MaxEntries, rls.MaxNameLen, 200)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	start := time.Now()
	resp, err := h.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if resp.GetOverallCode() != ok || len(resp.GetStatuses()) != rls.MaxDescriptors {
		t.Fatalf("overall %v with %d statuses", resp.GetOverallCode(), len(resp.GetStatuses()))
	}
	if took > 10*time.Second {
		t.Errorf("the largest request took %v, want well under 10 s", took)
	}
	seen := h.seen()
	if len(seen) != rls.MaxDescriptors {
		t.Fatalf("%d decisions, want %d", len(seen), rls.MaxDescriptors)
	}
	for _, d := range seen {
		if d.Policy != filesDomain+"/60" || limiter.ValidateKey(d.Key) != nil {
			t.Fatalf("decided %q under %q, want a valid key under %q", d.Key, d.Policy, filesDomain+"/60")
		}
	}
}

// TestOverlongValues: a value over MaxValueLen is the client's (Envoy
// passes a header's value), and a failed call lets the request through, so
// it is no error: where a limit applies the descriptor is OVER_LIMIT with
// nothing recorded, where none does it is OK. A value of MaxValueLen is
// decided like any long value, hashed into the key.
func TestOverlongValues(t *testing.T) {
	h := serveFiles(t)
	tooLong := newValue() + strings.Repeat("v", rls.MaxValueLen)
	atBound := tooLong[:rls.MaxValueLen]
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		code rlsv3.RateLimitResponse_Code
	}{
		{"mapped", request(0, "remote_address="+tooLong), overLimit},
		{"mapped, a peek", func() *rlsv3.RateLimitRequest {
			r := request(0, "remote_address="+tooLong)
			r.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
			return r
		}(), overLimit},
		{"unmapped", request(0, "nobody="+tooLong), ok},
		{"a limit of the files", &rlsv3.RateLimitRequest{Domain: filesDomain, Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("user=" + tooLong)}}, overLimit},
		{"an override of the files", &rlsv3.RateLimitRequest{Domain: filesDomain, Descriptors: []*ratelimitv3.RateLimitDescriptor{perMinute(9, descriptor("nobody="+tooLong))}}, overLimit},
		{"no limit of the files", &rlsv3.RateLimitRequest{Domain: filesDomain, Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("nobody=" + tooLong)}}, ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.call(t, tc.req)
			st := resp.GetStatuses()[0]
			if resp.GetOverallCode() != tc.code || st.GetCode() != tc.code || st.GetDurationUntilReset().AsDuration() != 0 {
				t.Fatalf("got overall %v, status %v; want %v, no wait", resp.GetOverallCode(), st, tc.code)
			}
		})
	}
	if n := len(h.seen()); n != 0 {
		t.Fatalf("overlong values made %d decisions, want none", n)
	}
	resp := h.call(t, request(0, "remote_address="+atBound))
	if st := resp.GetStatuses()[0]; st.GetCode() != ok || st.GetCurrentLimit().GetName() != "ip" {
		t.Fatalf("a value of %d bytes: %v, want decided", rls.MaxValueLen, st)
	}
	if seen := h.seen(); len(seen) != 1 || !strings.HasPrefix(seen[0].Key, "sha256:") {
		t.Fatalf("decisions %v, want one under a hashed key", seen)
	}
}
