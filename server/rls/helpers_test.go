package rls_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/rls"
)

// testTimeout is the check timeout where latency is not the point: other
// tests compile and run on the same two cores.
const testTimeout = 20 * time.Second

// testPolicies are the policies every test server has.
var testPolicies = []string{"ip=3/60s", "global=100/1m", "burst=37/60s", "cost=5/1m", "multi=2/10s,4/1m", "watch=2/60s+shadow", "big=100000/10s"}

// testMappings send domain "edge" descriptors to them.
var testMappings = []rls.Mapping{
	{Domain: "edge", Keys: []string{"remote_address"}, Policy: "ip"},
	{Domain: "edge", Keys: []string{"generic_key"}, Policy: "global"},
	{Domain: "edge", Keys: []string{"user"}, Policy: "burst"},
	{Domain: "edge", Keys: []string{"tenant", "user"}, Policy: "burst"},
	{Domain: "edge", Keys: []string{"tenant"}, Policy: "cost"},
	{Domain: "edge", Keys: []string{"remote_address", "path"}, Policy: "multi"},
	{Domain: "edge", Keys: []string{"gone"}, Policy: "removed-by-a-reload"},
	{Domain: "edge", Keys: []string{"watch"}, Policy: "watch"},
	{Domain: "edge", Keys: []string{"big"}, Policy: "big"},
	{Domain: "edge", Keys: []string{"multi"}, Policy: "multi"},
}

// harness is a served Service on a real TCP port, a client of it, and what
// its hooks saw.
type harness struct {
	lim    *limiter.Limiter
	rdb    *redis.Client
	srv    *rls.Server
	addr   string
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	served chan error // Serve's result

	mu        sync.Mutex
	decisions []limiter.Decision
}

// lookup finds one of testPolicies.
func lookup(name string) (limiter.Policy, bool) {
	for _, s := range testPolicies {
		if p, err := limiter.ParsePolicy(s); err == nil && p.Name == name {
			return p, true
		}
	}
	return limiter.Policy{}, false
}

// prepared finds one of testPolicies, ready for answers.
func prepared(name string) (*httplimit.Policy, bool) {
	p, ok := lookup(name)
	if !ok {
		return nil, false
	}
	return httplimit.Prepare(p), true
}

// newRedis is a client built as the server builds its own: context deadlines
// bound socket I/O and a script is never retried.
func newRedis(t testing.TB, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled, opt.MaxRetries = true, -1
	// 500 concurrent calls queue for the pool's connections: on a loaded
	// machine for longer than go-redis's default 4 s.
	opt.PoolTimeout = testTimeout
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// serve starts the service over a limiter on the Redis at url. edit may
// change the dependencies before the service is built.
func serve(t testing.TB, url string, edit func(*rls.Deps)) *harness {
	t.Helper()
	h := &harness{rdb: newRedis(t, url), served: make(chan error, 1)}
	h.lim = limiter.New(h.rdb)
	deps := rls.Deps{
		Checker: &httplimit.Checker{
			Limiter: h.lim, Timeout: testTimeout,
			Observers: []httplimit.Observer{httplimit.Hooks{Decision: h.record}},
		},
		Policy:   prepared,
		Mappings: func() []rls.Mapping { return testMappings },
	}
	if edit != nil {
		edit(&deps)
	}
	h.srv = rls.NewServer(nil)
	h.srv.Register(rls.New(deps))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	go func() { h.served <- h.srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.srv.Stop(ctx)
	})
	h.conn = dial(t, h.addr)
	h.client = rlsv3.NewRateLimitServiceClient(h.conn)
	return h
}

func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func (h *harness) record(d limiter.Decision) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.decisions = append(h.decisions, d)
}

// seen returns the decisions the OnDecision hook got so far.
func (h *harness) seen() []limiter.Decision {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]limiter.Decision(nil), h.decisions...)
}

// call sends a request and fails the test on an error.
func (h *harness) call(t testing.TB, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	resp, err := h.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
	}
	return resp
}

// request builds a domain "edge" request: each descriptor is
// "key=value,key=value".
func request(hits uint32, descriptors ...string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits}
	for _, d := range descriptors {
		req.Descriptors = append(req.Descriptors, descriptor(d))
	}
	return req
}

func descriptor(s string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for pair := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(pair, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// newValue is a descriptor value no other test uses.
func newValue() string { return "t-" + uuid.NewString()[:13] }

// formatHeaders writes SPEC §3's fields, one item per rule: what the server
// injects (the HTTP check's formatter).
func formatHeaders(d limiter.Decision) (rateLimit, rateLimitPolicy string) {
	var rl, rlp []string
	for _, r := range d.Rules {
		name := d.Policy
		if len(d.Rules) > 1 {
			name += "/" + strconv.FormatInt(r.WindowMs/1000, 10)
		}
		rl = append(rl, fmt.Sprintf("%q;r=%d;t=%d", name, r.Remaining, (r.ResetMs+999)/1000))
		rlp = append(rlp, fmt.Sprintf("%q;q=%d;w=%d", name, r.Limit, r.WindowMs/1000))
	}
	return strings.Join(rl, ", "), strings.Join(rlp, ", ")
}

// headers turns response_headers_to_add into a map, failing on a repeat.
func headers(t testing.TB, resp *rlsv3.RateLimitResponse) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		if _, dup := out[h.GetKey()]; dup {
			t.Fatalf("header %s added twice", h.GetKey())
		}
		out[h.GetKey()] = h.GetValue()
	}
	return out
}

// windowCount is the entries of key's log under the named policy, read from
// Redis without consuming.
func (h *harness) windowCount(t testing.TB, key, policy string) int {
	t.Helper()
	p, _ := lookup(policy)
	w, err := h.lim.Window(context.Background(), key, p)
	if err != nil {
		t.Fatal(err)
	}
	return w.Count
}
