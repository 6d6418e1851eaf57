package limiter

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
)

// TestWarmLoadsEveryScript: after Warm, Redis holds every script a check or a
// window read may send, so no first check is refused as unknown.
func TestWarmLoadsEveryScript(t *testing.T) {
	opt, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	hashes := make([]string, len(scripts))
	for i, s := range scripts {
		hashes[i] = s.Hash()
	}
	if len(hashes) < 1+len(Algorithms()) { // every algorithm's decision script, and the window read
		t.Fatalf("%d scripts listed for %d algorithms", len(hashes), len(Algorithms()))
	}
	l := New(rdb)
	if err := l.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	exist, err := rdb.ScriptExists(ctx, hashes...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range exist {
		if !ok {
			t.Errorf("script %d of %d (%s) is not loaded after Warm", i+1, len(hashes), hashes[i])
		}
	}
}
