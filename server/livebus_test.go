package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/livebus"
)

// TestServiceDecisionsReachTheLiveView runs a ratescope server and, beside
// it on the same Redis and database (1: Pub/Sub channels carry it), a Go
// service limited by httplimit with WithLiveView: a viewer of the server
// watching the service's window gets the service's decisions, in order, named
// by the service's instance, and snapshots show their entries.
func TestServiceDecisionsReachTheLiveView(t *testing.T) {
	const policy = "checkout=100/1m"
	u, err := url.Parse(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/1"
	db1 := u.String()
	app := startApp(t, map[string]string{"REDIS_URL": db1}, "--policy", policy)
	key := newKey()
	v := watch(t, app, "policy=checkout&key="+key, nil)
	v.next("hello", nil)

	// The service: its own Redis client, limiter and publisher.
	opts, err := redis.ParseURL(db1)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	pub := livebus.NewPublisher(rdb, "checkout-1")
	go pub.Run(context.Background())
	defer pub.Close()
	p, err := limiter.ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ids []string // every decision the service made, in order
	mw := httplimit.New(limiter.New(rdb),
		httplimit.WithKey(func(*http.Request) (string, error) { return key, nil }),
		httplimit.WithTimeout(2*time.Second),
		httplimit.WithOnDecision(func(d limiter.Decision) { mu.Lock(); ids = append(ids, d.ID); mu.Unlock() }),
		httplimit.WithLiveView(pub))
	svc := httptest.NewServer(mw.Limit(p)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer svc.Close()
	get := func() {
		t.Helper()
		resp, err := http.Get(svc.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the service answered %d", resp.StatusCode)
		}
	}

	// The publisher hears of the viewer through the server's presence
	// envelopes: request until a decision gets through.
	deadline := time.Now().Add(10 * time.Second)
	var first map[string]any
	for first == nil {
		get()
		timeout := time.After(300 * time.Millisecond)
	wait:
		for {
			select {
			case m := <-v.msgs:
				if m["type"] == "decision" {
					first = m
					break wait
				}
			case <-timeout:
				break wait
			}
		}
		if first == nil && time.Now().After(deadline) {
			t.Fatal("no decision of the service reached the viewer")
		}
	}
	const n = 20
	for range n {
		get()
	}
	mu.Lock()
	all := slices.Clone(ids)
	mu.Unlock()
	start := slices.Index(all, first["id"].(string))
	if start < 0 {
		t.Fatalf("the viewer got decision %v, which the service never made", first)
	}
	got := []map[string]any{first}
	for len(got) < len(all)-start {
		got = append(got, v.next("decision", nil))
	}
	for i, d := range got {
		if d["id"] != all[start+i] || d["instance"] != "checkout-1" || d["key"] != key || d["policy"] != "checkout" ||
			d["allowed"] != true || d["count"] != float64(start+i+1) || d["limit"] != 100.0 {
			t.Fatalf("decision %d of the service: %v, want id %s, count %d, from checkout-1", i, d, all[start+i], start+i+1)
		}
	}
	// Entries sort by time, then id: compare them as sets.
	snap := v.next("snapshot", func(m map[string]any) bool { return m["count"] == float64(len(all)) })
	var entries []string
	for _, e := range snap["entries"].([]any) {
		entries = append(entries, e.(map[string]any)["id"].(string))
	}
	slices.Sort(entries)
	slices.Sort(all)
	if !slices.Equal(entries, all) {
		t.Fatalf("snapshot entries %v, want the service's %v", entries, all)
	}
}
