package tenants_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/tenants"
)

func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }

// changes records what a Store told its Changed.
type changes struct {
	mu  sync.Mutex
	got []string
}

func (c *changes) add(policy, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, policy+"/"+key)
}

func (c *changes) has(s string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range c.got {
		if g == s {
			return true
		}
	}
	return false
}

// start runs a Store over rdb for the policies named until the test ends,
// and waits until it has read Redis.
func start(t *testing.T, rdb redis.UniversalClient, policies ...string) (*tenants.Store, *changes) {
	t.Helper()
	ch := &changes{}
	s := tenants.New(tenants.Deps{Redis: rdb, Policies: func() []string { return policies }, Changed: ch.add})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil(t, 10*time.Second, "the store's first read", func() bool { return s.Syncs() > 0 })
	return s, ch
}

// waitUntil polls ok every 5 ms, failing the test after within.
func waitUntil(t *testing.T, within time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func client(t *testing.T, url string) redis.UniversalClient {
	t.Helper()
	var rdb redis.UniversalClient
	if strings.Contains(url, "addr=") {
		o, err := redis.ParseClusterURL(url)
		if err != nil {
			t.Fatal(err)
		}
		rdb = redis.NewClusterClient(o)
	} else {
		o, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		rdb = redis.NewClient(o)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// TestSharedAcrossStores: an override set through one Store applies in
// another on the same Redis within a second, and a third started later
// reads it; key beats prefix beats nothing, the longest prefix wins; a
// removal applies everywhere, and each change is told to Changed — a key's
// with its key, a prefix's for the whole policy.
func TestSharedAcrossStores(t *testing.T) {
	for name, url := range map[string]func(t *testing.T) string{
		"standalone": func(t *testing.T) string { return redistest.URL(t) },
		"cluster":    func(t *testing.T) string { return redistest.StartCluster(t).URL },
		"embedded":   func(t *testing.T) string { return redistest.EmbeddedURL(t) },
	} {
		t.Run(name, func(t *testing.T) {
			u := url(t)
			a, _ := start(t, client(t, u), "api")
			b, bch := start(t, client(t, u), "api")
			ctx := context.Background()
			put := func(who tenants.Subject, rules ...string) {
				t.Helper()
				if _, err := a.Put(ctx, "api", who, rules, "plan"); err != nil {
					t.Fatal(err)
				}
			}
			put(tenants.Subject{Key: "acme:1"}, "100/1m")
			took := waitUntil(t, time.Second, "a key's override on the other store", func() bool { return b.Overridden("api", "acme:1") })
			t.Logf("applied on the other store after %v", took)
			put(tenants.Subject{Prefix: "acme:"}, "50/1m")
			put(tenants.Subject{Prefix: "acme:eu:"}, "20/1m")
			waitUntil(t, time.Second, "both prefixes", func() bool { return b.Count("api") == 3 })
			for key, want := range map[string]string{
				"acme:1": "key", "acme:2": "prefix:acme:", "acme:eu:7": "prefix:acme:eu:", "globex": "",
			} {
				o, m := b.Lookup("api", key)
				if got := o.Label(); (m == tenants.MatchNone && want != "") || (m != tenants.MatchNone && got != want) {
					t.Errorf("Lookup(%q) = %s %q, want %q", key, m, got, want)
				}
			}
			if !bch.has("api/acme:1") || !bch.has("api/") {
				t.Errorf("Changed heard %v; want api/acme:1 and api/", bch.got)
			}

			c, _ := start(t, client(t, u), "api")
			if o, m := c.Lookup("api", "acme:eu:1"); m != tenants.MatchPrefix || o.Prefix != "acme:eu:" || o.Note != "plan" || time.Since(time.UnixMilli(o.UpdatedMs)).Abs() > time.Hour {
				t.Errorf("a store started later: %s %+v", m, o)
			}
			if ok, err := a.Delete(ctx, "api", tenants.Subject{Key: "acme:1"}); !ok || err != nil {
				t.Fatalf("Delete = %v, %v", ok, err)
			}
			if ok, _ := a.Delete(ctx, "api", tenants.Subject{Key: "acme:1"}); ok {
				t.Error("a second Delete found it again")
			}
			waitUntil(t, time.Second, "the removal", func() bool {
				o, _ := c.Lookup("api", "acme:1")
				return o.Prefix == "acme:"
			})
		})
	}
}

// TestRereadsWhatItMissed: a change Redis holds but whose announcement an
// instance never heard (written around the script, as one lost with a
// connection would be) is read once its version is compared — on Refresh,
// or at the latest every 30 s.
func TestRereadsWhatItMissed(t *testing.T) {
	rdb := client(t, redistest.URL(t))
	s, _ := start(t, rdb, "api")
	ctx := context.Background()
	if _, err := s.Put(ctx, "api", tenants.Subject{Key: "k1"}, []string{"5/1s"}, ""); err != nil {
		t.Fatal(err)
	}
	rdb.HSet(ctx, tenants.HashKey("api"), "key:k2", `{"rules":["7/1s"],"note":"quiet","updatedMs":1}`, "version", "by-hand")
	time.Sleep(100 * time.Millisecond)
	if s.Overridden("api", "k2") {
		t.Fatal("applied a change nobody announced: the test cannot tell a re-read from an announcement")
	}
	s.Refresh()
	waitUntil(t, 5*time.Second, "the re-read after Refresh", func() bool { return s.Overridden("api", "k2") })
	// A hash gone (FLUSHDB) empties what the instance holds.
	rdb.Del(ctx, tenants.HashKey("api"))
	s.Refresh()
	waitUntil(t, 5*time.Second, "the re-read of a hash gone", func() bool { return s.Count("api") == 0 })
}

// TestFull: a policy holds at most MaxPerPolicy overrides — counted with
// the write in one script, so no two instances both take the last place —
// and one already there may still change.
func TestFull(t *testing.T) {
	rdb := client(t, redistest.RealURL(t))
	s, _ := start(t, rdb, "api")
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range tenants.MaxPerPolicy {
		pipe.HSet(ctx, tenants.HashKey("api"), fmt.Sprintf("key:k%d", i), `{"rules":["1/1s"],"note":"","updatedMs":1}`)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "api", tenants.Subject{Prefix: "new:"}, []string{"1/1s"}, ""); !errors.Is(err, tenants.ErrFull) {
		t.Fatalf("the %dth Put: %v, want ErrFull", tenants.MaxPerPolicy+1, err)
	}
	if _, err := s.Put(ctx, "api", tenants.Subject{Key: "k7"}, []string{"2/1s"}, ""); err != nil {
		t.Fatalf("changing one there: %v", err)
	}
	if ok, err := s.Delete(ctx, "api", tenants.Subject{Key: "k8"}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := s.Put(ctx, "api", tenants.Subject{Prefix: "new:"}, []string{"1/1s"}, ""); err != nil {
		t.Fatalf("after a removal: %v", err)
	}
}

// TestParseRules: the limiter's own parser reads an override's rules,
// against the bounds of the policy's algorithm, naming the rule at fault;
// options stay the policy's.
func TestParseRules(t *testing.T) {
	logp, _ := limiter.ParsePolicy("p=5/1m")
	gcra, _ := limiter.ParsePolicy("p=5/1m@gcra")
	rules, err := tenants.ParseRules(logp, []string{"1000/1m", "20000/24h"})
	if err != nil || len(rules) != 2 || rules[1].Limit != 20000 || rules[1].Window != 24*time.Hour {
		t.Fatalf("ParseRules = %v, %v", rules, err)
	}
	if _, err := tenants.ParseRules(gcra, []string{"1000000/1m"}); err != nil {
		t.Errorf("a million a minute on gcra: %v", err)
	}
	for _, c := range []struct {
		p     limiter.Policy
		rules []string
		field string
		says  string
	}{
		{logp, []string{"1000000/1m"}, "rules[0]", "100000"},
		{logp, []string{"5/1m", "abc"}, "rules[1]", "LIMIT/WINDOW"},
		{logp, []string{"5/1m+shadow"}, "rules[0]", "options stay the policy's"},
		{logp, []string{"5/1m@gcra"}, "rules[0]", "options stay the policy's"},
		{logp, []string{"5/1m,6/1h"}, "rules[0]", "one LIMIT/WINDOW"},
		{logp, []string{"5/1m", "6/60s"}, "rules", "twice"},
		{logp, []string{}, "rules", "at least one"},
		{logp, []string{"5/500ms"}, "rules[0]", "whole seconds"},
		{logp, make([]string, 17), "rules", "at most 16"},
	} {
		_, err := tenants.ParseRules(c.p, c.rules)
		var re *tenants.RuleError
		if !errors.As(err, &re) || re.Field() != c.field || !strings.Contains(re.Error(), c.says) {
			t.Errorf("ParseRules(%q) = %v, want %s saying %q", c.rules, err, c.field, c.says)
		}
	}
}

// TestMiddlewareDecidesWithTheOverride: the net/http middleware, through a
// Checker whose Resolve is the Store's, decides a client with an override by
// its rules — RateLimit-Policy shows them, the 429 names the override — on
// the same log as before, and everyone else by the policy's.
func TestMiddlewareDecidesWithTheOverride(t *testing.T) {
	rdb := client(t, redistest.URL(t))
	s, _ := start(t, rdb, "mw")
	lim := limiter.New(rdb)
	p, _ := limiter.ParsePolicy("mw=1/1m")
	if _, err := s.Put(context.Background(), "mw", tenants.Subject{Prefix: "10.9."}, []string{"2/1m", "10/1h"}, ""); err != nil {
		t.Fatal(err)
	}
	mw := httplimit.NewMiddleware(&httplimit.Checker{Limiter: lim, Resolve: s.Resolve},
		httplimit.WithKey(func(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }))
	h := mw.Limit(p)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	do := func(client string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Client", client)
		h.ServeHTTP(w, r)
		return w
	}
	for i := range 2 {
		w := do("10.9.0.1")
		if w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"mw/60";q=2;w=60, "mw/3600";q=10;w=3600` {
			t.Fatalf("check %d under the override: %d %q", i+1, w.Code, w.Header().Get("RateLimit-Policy"))
		}
	}
	w := do("10.9.0.1")
	if w.Code != 429 || !strings.Contains(w.Body.String(), `"override":"prefix:10.9."`) || !strings.Contains(w.Body.String(), `"limit":2`) {
		t.Fatalf("the third under 2/1m: %d %s", w.Code, w.Body)
	}
	if w := do("10.8.0.1"); w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"mw";q=1;w=60` || strings.Contains(w.Body.String(), "override") {
		t.Fatalf("another client: %d %q", w.Code, w.Header().Get("RateLimit-Policy"))
	}
}
