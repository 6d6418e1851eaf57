package server_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

const waitOutConfig = `
policies:
  - name: keep
    rules: ["2/1s"]
envoy:
  - domain: edge
    descriptors:
      - keys: [generic_key]
        policy: keep
`

// answer is one decision as a client of an entry point sees it.
type waitAnswer struct {
	allowed   bool
	cached    bool
	remaining int64
	retry     time.Duration // what the client is told to wait
	got       time.Time     // when the client had the answer
}

// TestWaitingOutEveryAnswerIsAllowed is a client that does what every
// answer promises: it waits exactly the retry it was told — Redis's own
// denial and the deny cache's alike, over HTTP and gRPC, some of them made
// while Redis held every command for 300 ms — and is then allowed, never
// denied again by the same window.
func TestWaitingOutEveryAnswerIsAllowed(t *testing.T) {
	s := redistest.Start(t) // its own: the stalls hold every client of it
	app := startApp(t, map[string]string{"REDIS_URL": s.URL}, "--config", writeConfig(t, waitOutConfig), "--grpc-addr", "127.0.0.1:0")
	rls := rlsv3.NewRateLimitServiceClient(grpcConn(t, app))

	entryPoints := map[string]func(t *testing.T, key string) waitAnswer{
		"http": func(t *testing.T, key string) waitAnswer {
			r := do(t, "POST", app.URL+"/api/v1/check?policy=keep&key="+key, "")
			a := waitAnswer{allowed: r.status == 200, got: time.Now()}
			if r.status != 200 && r.status != 429 {
				t.Fatalf("check: %d %s", r.status, r.raw)
			}
			a.cached = r.body["cached"] == true
			a.remaining = num(t, r, "remaining")
			a.retry = time.Duration(num(t, r, "retryAfterMs")) * time.Millisecond
			return a
		},
		"grpc": func(t *testing.T, key string) waitAnswer {
			before := localDenials(t, app)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "generic_key", Value: key}},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			a := waitAnswer{allowed: resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, got: time.Now()}
			a.retry = resp.GetStatuses()[0].GetDurationUntilReset().AsDuration()
			a.remaining = int64(resp.GetStatuses()[0].GetLimitRemaining())
			a.cached = localDenials(t, app) > before // the subtests run one at a time
			return a
		},
	}
	for _, name := range []string{"http", "grpc"} {
		check := entryPoints[name]
		t.Run(name, func(t *testing.T) {
			key := newKey()
			waited := map[bool]int{} // cached or not → answers waited out
			for round := 0; waited[true] < 2 || waited[false] < 2; round++ {
				if round == 12 {
					t.Fatalf("12 rounds waited out %d cached and %d uncached answers: want 2 of each", waited[true], waited[false])
				}
				var a waitAnswer
				for i := 0; ; i++ {
					if i > 0 && a.remaining == 0 && (round%4 == 1 || round%4 == 2) {
						s.Stall(300 * time.Millisecond) // Redis runs the denial 300 ms after it is sent
					}
					if a = check(t, key); !a.allowed {
						break
					}
					if i == 10 {
						t.Fatalf("round %d: 10 checks allowed on 2/1s", round)
					}
				}
				if a.cached {
					t.Fatalf("round %d: the first denial came from the cache", round)
				}
				// That denial was Redis's; in odd rounds wait out the next one,
				// the cache's when it serves.
				if round%2 == 1 {
					if a = check(t, key); a.allowed {
						t.Fatalf("round %d: allowed right after a denial", round)
					}
				}
				if a.retry <= 0 {
					t.Fatalf("round %d: a denial with no retry: %+v", round, a)
				}
				time.Sleep(time.Until(a.got.Add(a.retry)))
				if b := check(t, key); !b.allowed {
					t.Fatalf("round %d: waited the %v a %s denial told, then denied again (told %v more)", round, a.retry, map[bool]string{true: "cached", false: "Redis's"}[a.cached], b.retry)
				}
				waited[a.cached]++
			}
		})
	}
}

var localDenialsLine = regexp.MustCompile(`(?m)^ratescope_local_denials_total (\d+)`)

func localDenials(t testing.TB, app *apptest.App) int64 {
	t.Helper()
	m := localDenialsLine.FindStringSubmatch(metrics(t, app))
	if m == nil {
		t.Fatal("/metrics has no ratescope_local_denials_total")
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}
