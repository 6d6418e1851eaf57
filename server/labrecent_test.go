package server_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
)

// TestLabRecentRequests: a lab's requests are kept in a capped Redis list
// beside its windows, expiring one window after the newest, and a viewer
// that joins — on any instance — gets them first, oldest first; a reset
// empties the list.
func TestLabRecentRequests(t *testing.T) {
	url := redistest.URL(t)
	a := startApp(t, map[string]string{"REDIS_URL": url})
	b := startApp(t, map[string]string{"REDIS_URL": url})
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	lab := newLab()
	key := "rate_limit:{lab:" + lab + "}:@lab:requests"
	body := `{"lab":"` + lab + `","limit":2,"windowMs":30000}`
	var ids []string
	for range 3 {
		r := do(t, "POST", a.URL+"/api/v1/lab/check", body)
		labResults(t, r)
		ids = append(ids, r.body["id"].(string))
	}
	if n, err := rdb.LLen(ctx, key).Result(); err != nil || n != 3 {
		t.Errorf("LLEN %s = %d, %v; want 3", key, n, err)
	}
	if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > 30*time.Second {
		t.Errorf("PTTL %s = %v, %v; want at most the lab's 30 s window", key, ttl, err)
	}

	snap := watchAt(t, b, "/ws/lab", "lab="+lab, nil).next("labSnapshot", nil)
	reqs, _ := snap["requests"].([]any)
	if snap["lab"] != lab || len(reqs) != len(ids) {
		t.Fatalf("labSnapshot on the other instance: %v, want the 3 requests %v", snap, ids)
	}
	for i, x := range reqs {
		m := x.(map[string]any)
		if m["id"] != ids[i] || m["lab"] != lab || m["limit"] != 2.0 || m["windowMs"] != 30000.0 {
			t.Errorf("request %d of the snapshot: %v, want id %s", i, m, ids[i])
		}
		if rs, _ := m["results"].([]any); len(rs) != len(labAlgorithms) {
			t.Errorf("request %d of the snapshot has %d results", i, len(rs))
		}
	}

	if r := do(t, "DELETE", a.URL+"/api/v1/lab?lab="+lab, ""); r.status != http.StatusNoContent {
		t.Fatalf("reset: %d %s", r.status, r.raw)
	}
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Errorf("after a reset %s exists (%d, %v)", key, n, err)
	}
	snap = watchAt(t, b, "/ws/lab", "lab="+lab, nil).next("labSnapshot", nil)
	if reqs, _ := snap["requests"].([]any); len(reqs) != 0 {
		t.Errorf("after a reset a viewer gets %d requests, want none", len(reqs))
	}

	// The list keeps the newest 600: the busiest traffic the page sends.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 76 {
				if r := do(t, "POST", a.URL+"/api/v1/lab/check", body); r.status != http.StatusOK {
					t.Errorf("lab check: %d %s", r.status, r.raw)
					return
				}
			}
		})
	}
	wg.Wait()
	if n, err := rdb.LLen(ctx, key).Result(); err != nil || n != 600 {
		t.Errorf("after 608 requests LLEN %s = %d, %v; want 600", key, n, err)
	}
}
