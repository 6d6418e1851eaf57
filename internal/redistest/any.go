package redistest

import (
	"context"
	"os"
	"os/exec"

	"github.com/ratescope/ratescope/internal/embedredis"
)

// EnvURL names a Redis to use instead of starting one (standalone only). It is
// taken to be a real Redis.
const EnvURL = "RATESCOPE_TEST_REDIS_URL"

// Kind says which Redis AnyRedis chose.
type Kind string

// The kinds of Redis, in the order AnyRedis prefers them.
const (
	Given    Kind = "given"    // RATESCOPE_TEST_REDIS_URL
	Real     Kind = "real"     // a redis-server started here
	Embedded Kind = "embedded" // the in-process Redis `go run .` uses
)

// AnyRedis returns a Redis for code that works on any: RATESCOPE_TEST_REDIS_URL
// when set, else a new redis-server (files in dir) when one is on PATH, else a
// new embedded in-process Redis over TCP. stop releases what was started.
func AnyRedis(ctx context.Context, dir string) (url string, kind Kind, stop func(), err error) {
	if u := os.Getenv(EnvURL); u != "" {
		return u, Given, func() {}, nil
	}
	if _, err := exec.LookPath("redis-server"); err == nil {
		p, err := Launch(ctx, dir)
		if err != nil {
			return "", Real, nil, err
		}
		return p.URL, Real, p.Stop, nil
	}
	e, err := embedredis.Start()
	if err != nil {
		return "", Embedded, nil, err
	}
	return e.URL(), Embedded, e.Close, nil
}
