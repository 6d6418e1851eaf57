package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/rls"
)

// hugeDescriptor is a descriptor at the bounds, under a limit override of
// 1,000 a minute: rls.MaxEntries entries, each key rls.MaxNameLen bytes and
// each value 4 KiB, all distinct to tag.
func hugeDescriptor(tag string) *ratelimitv3.RateLimitDescriptor {
	d := override(1000, minute, &ratelimitv3.RateLimitDescriptor{})
	for i := range rls.MaxEntries {
		p := fmt.Sprintf("%s-%d-", tag, i)
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{
			Key:   p + strings.Repeat("k", rls.MaxNameLen-len(p)),
			Value: p + strings.Repeat("v", 4<<10),
		})
	}
	return d
}

// TestEnvoyOverrideStateBounded: on a files domain, 100 calls whose
// descriptor carries a limit override and huge entries of its own create no
// policy name and no metric series, and each only one Redis key of bounded
// length: the override is decided under a name of the configuration's (the
// domain, and the window its files do not have), its client key hashed.
// On a real redis-server (skipped without one).
func TestEnvoyOverrideStateBounded(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "config")
	domain := compatFiles(t, dir)
	app := startApp(t, map[string]string{"REDIS_URL": rs.URL}, "--envoy-config-dir", dir, "--grpc-addr", "127.0.0.1:0")
	c := newRLSCaller(t, app.GRPCAddr, domain)
	name := domain + "/60"

	if got := c.call(hugeDescriptor("first")).GetStatuses()[0].GetCurrentLimit().GetName(); got != name {
		t.Errorf("decided under %.100q, want %q", got, name)
	}
	metrics(t, app) // its own request is counted from the next one on
	before := metrics(t, app)
	keys, mem := rdb.DBSize(ctx).Val(), usedMemory(t, rdb)
	for i := range 100 {
		if st := c.call(hugeDescriptor(strconv.Itoa(i))).GetStatuses()[0]; st.GetCode() != codeOK || st.GetLimitRemaining() != 999 {
			t.Fatalf("call %d: %v, want OK with 999 remaining", i, st)
		}
	}
	after := metrics(t, app)

	if added := newSeries(before, after); len(added) > 0 {
		t.Errorf("100 calls added %d metric series, e.g. %.200s", len(added), added[0])
	}
	if grown := len(after) - len(before); grown > 16<<10 {
		t.Errorf("/metrics grew by %d bytes, want at most 16 KiB", grown)
	}
	if !strings.Contains(after, `ratescope_decisions_total{outcome="allowed",policy="`+name+`"} 101`) {
		t.Errorf("decisions not counted under %q:\n%s", name, grepLines(after, "decisions_total"))
	}
	if n := rdb.DBSize(ctx).Val() - keys; n > 100 {
		t.Errorf("100 calls added %d Redis keys, want one each", n)
	}
	longest := ""
	for it := rdb.Scan(ctx, 0, "*", 1000).Iterator(); it.Next(ctx); {
		if k := it.Val(); len(k) > len(longest) {
			longest = k
		}
	}
	if limit := len("rate_limit:{}:") + limiter.MaxKeyLen + len(name); len(longest) > limit {
		t.Errorf("a Redis key of %d bytes (%.120s…), want at most %d", len(longest), longest, limit)
	}
	if grown := usedMemory(t, rdb) - mem; grown > 512<<10 {
		t.Errorf("Redis's used_memory grew by %d bytes for 100 one-entry windows, want well under 512 KiB", grown)
	}
}

// TestEnvoyLargeCallsBesideHTTP: a call of 64,000 entries is refused at
// once, and the largest call the bounds allow — every descriptor of every
// entry, under limit overrides — is decided within a generous bound, while
// an HTTP check sent beside each answers 200.
func TestEnvoyLargeCallsBesideHTTP(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	domain := compatFiles(t, dir)
	app := startApp(t, nil, "--envoy-config-dir", dir, "--grpc-addr", "127.0.0.1:0")
	c := newRLSCaller(t, app.GRPCAddr, domain)

	many := override(1000, minute, &ratelimitv3.RateLimitDescriptor{})
	for i := range 64_000 {
		v := fmt.Sprintf("%06d-%s", i, strings.Repeat("v", 40)) // "k=" + v is hashed while the key does not fit
		many.Entries = append(many.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: v})
	}
	largest := make([]*ratelimitv3.RateLimitDescriptor, rls.MaxDescriptors)
	for i := range largest {
		largest[i] = hugeDescriptor("largest-" + strconv.Itoa(i))
		for _, e := range largest[i].Entries {
			e.Value = e.Value[:200]
		}
	}
	for i, call := range []struct {
		name string
		ds   []*ratelimitv3.RateLimitDescriptor
		code codes.Code
	}{
		{"64,000 entries", []*ratelimitv3.RateLimitDescriptor{many}, codes.InvalidArgument},
		{"the largest allowed", largest, codes.OK},
	} {
		beside := make(chan string, 1)
		go func() { beside <- httpCheck(app.URL, fmt.Sprintf("beside-%d", i)) }()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		start := time.Now()
		resp, err := c.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: call.ds})
		took := time.Since(start)
		cancel()
		if status.Code(err) != call.code {
			t.Fatalf("%s: %v, want %v", call.name, err, call.code)
		}
		if err == nil && (resp.GetOverallCode() != codeOK || len(resp.GetStatuses()) != len(call.ds)) {
			t.Fatalf("%s: overall %v, %d statuses", call.name, resp.GetOverallCode(), len(resp.GetStatuses()))
		}
		if took > 10*time.Second {
			t.Errorf("%s took %v, want well under 10 s", call.name, took)
		}
		if got := <-beside; got != "200" {
			t.Errorf("an HTTP check beside %s: %s, want 200", call.name, got)
		}
	}
}

// httpCheck sends one check on policy default and returns its status code,
// or what went wrong.
func httpCheck(base, key string) string {
	resp, err := http.Post(base+"/api/v1/check?policy=default&key="+key, "", nil)
	if err != nil {
		return err.Error()
	}
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

// TestEnvoyStatSeriesBounded: detailed_metric and value_to_metric name a
// series per value a client sends, so each limit keeps the 100 most
// recently counted as series of their own and counts the others' hits
// under the limit's own name: after 150 values the series stay under the
// cap and no hit is lost. A long value is hashed as it is in a key.
func TestEnvoyStatSeriesBounded(t *testing.T) {
	const perLimit = 100 // the server's envoyStatKeysPerLimit
	dir := filepath.Join(t.TempDir(), "config")
	domain := compatFiles(t, dir)
	app := startApp(t, nil, "--envoy-config-dir", dir, "--grpc-addr", "127.0.0.1:0")
	c := newRLSCaller(t, app.GRPCAddr, domain)

	long := strings.Repeat("x", 4<<10)
	for i := range perLimit + 50 {
		c.call(desc("region=r" + strconv.Itoa(i)))
		c.call(desc("team=t"+strconv.Itoa(i), "member=m"))
	}
	c.call(desc("region=" + long))
	hits := envoyHits(metrics(t, app))

	for _, l := range []struct{ limit, prefix, last string }{
		{domain + ".region", domain + ".region_", domain + ".region_" + sha256Of(long)},
		{domain + ".team.member", domain + ".team_", domain + ".team_t149.member"},
	} {
		series, total := 0, 0.0
		for key, n := range hits {
			switch {
			case strings.HasPrefix(key, l.prefix):
				series++
				total += n
			case key == l.limit:
				total += n
			}
			if len(key) > 256 {
				t.Errorf("a statistics key of %d bytes: %.100s…", len(key), key)
			}
		}
		if series > perLimit {
			t.Errorf("%s: %d series of its values, want at most %d", l.limit, series, perLimit)
		}
		want := float64(perLimit + 50)
		if l.limit == domain+".region" {
			want++
		}
		if total != want {
			t.Errorf("%s: %v hits in all, want %v", l.limit, total, want)
		}
		if _, ok := hits[l.last]; !ok {
			t.Errorf("%s: the last value's series %q is missing", l.limit, l.last)
		}
	}
}

// envoyHits reads ratescope_envoy_hits_total's total_hits per key.
func envoyHits(metrics string) map[string]float64 {
	re := regexp.MustCompile(`(?m)^ratescope_envoy_hits_total\{key="([^"]*)",stat="total_hits"\} (\S+)$`)
	out := map[string]float64{}
	for _, m := range re.FindAllStringSubmatch(metrics, -1) {
		n, _ := strconv.ParseFloat(m[2], 64)
		out[m[1]] = n
	}
	return out
}

// newSeries lists the ratescope series in after that are not in before.
func newSeries(before, after string) []string {
	seen := map[string]bool{}
	for _, s := range seriesOf(before) {
		seen[s] = true
	}
	var added []string
	for _, s := range seriesOf(after) {
		if !seen[s] {
			added = append(added, s)
		}
	}
	return added
}

// seriesOf lists the ratescope series of a /metrics page: name and labels.
func seriesOf(metrics string) []string {
	var out []string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "ratescope_") {
			out = append(out, l[:strings.LastIndexByte(l, ' ')])
		}
	}
	return out
}

// sha256Of is how a long value stands in keys: "sha256:" and the first 32
// hex digits of its SHA-256.
func sha256Of(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// usedMemory is Redis's used_memory, in bytes.
func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.InfoMap(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
