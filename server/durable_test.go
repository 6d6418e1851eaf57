package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/server"
)

// TestDurableReplicasFlag: the embedded Redis has no replicas to wait for,
// so --durable-replicas above 0 without a Redis URL is refused at start, as
// is a count below 0.
func TestDurableReplicasFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--durable-replicas", "1"}, nil, `--durable-replicas "1": the embedded Redis has no replicas`},
		{nil, map[string]string{"RATESCOPE_DURABLE_REPLICAS": "2"}, `RATESCOPE_DURABLE_REPLICAS="2": the embedded Redis has no replicas`},
		{[]string{"--durable-replicas", "-1"}, map[string]string{"REDIS_URL": "redis://127.0.0.1:1"}, `--durable-replicas "-1": want 0`},
		{nil, map[string]string{"RATESCOPE_DURABLE_REPLICAS": "one"}, "RATESCOPE_DURABLE_REPLICAS=\"one\": want a whole number"},
	} {
		args := append([]string{"ratescope", "--addr", "127.0.0.1:0"}, c.args...)
		err := server.Run(context.Background(), args, func(k string) string { return c.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: %v, want an error naming %q", c.args, c.env, err, c.want)
		}
	}
}

// TestDurableReplicas: with --durable-replicas 1 and the replica paused, a
// check that would be allowed gets the fail mode's answer within the check
// timeout (503 when closed; 200 without RateLimit fields when open), counted
// as a Redis error; a full window's denial still answers 429; /readyz says
// "noreplicas" (503); once the replica answers again, so do checks and
// readiness.
func TestDurableReplicas(t *testing.T) {
	d := redistest.StartDeployment(t, redistest.DeploymentConfig{})
	env := map[string]string{"REDIS_URL": d.URL, "RATESCOPE_CHECK_TIMEOUT": "1s"}
	closed := startApp(t, env, "--durable-replicas", "1", "--policy", "api=2/1m")
	open := startApp(t, env, "--durable-replicas", "1", "--policy", "api=2/1m", "--fail-mode", "open")
	full := newKey()
	for i, want := range []int{200, 200, 429} {
		if r := do(t, "POST", closed.URL+"/api/v1/check?policy=api&key="+full, ""); r.status != want {
			t.Fatalf("check %d: %d %s, want %d", i+1, r.status, r.raw, want)
		}
	}

	replica := d.Nodes[1].Addr
	d.Pause(replica)
	defer d.Resume(replica)
	start := time.Now()
	if r := do(t, "POST", closed.URL+"/api/v1/check?policy=api&key="+newKey(), ""); r.status != http.StatusServiceUnavailable {
		t.Fatalf("fail closed, replica paused: %d %s, want 503", r.status, r.raw)
	}
	if took := time.Since(start); took > time.Second+2*time.Second {
		t.Fatalf("the fail mode answered after %v; the check timeout is 1s", took)
	}
	r := do(t, "POST", open.URL+"/api/v1/check?policy=api&key="+newKey(), "")
	if r.status != http.StatusOK || r.header.Get("RateLimit") != "" {
		t.Fatalf("fail open, replica paused: %d RateLimit=%q %s, want 200 without RateLimit", r.status, r.header.Get("RateLimit"), r.raw)
	}
	if r := do(t, "POST", closed.URL+"/api/v1/check?policy=api&key="+full, ""); r.status != http.StatusTooManyRequests {
		t.Fatalf("a full window, replica paused: %d %s, want 429", r.status, r.raw)
	}
	_, metrics := doRaw(t, "GET", closed.URL+"/metrics")
	if !strings.Contains(metrics, `ratescope_redis_errors_total{op="check"} 1`) {
		t.Fatalf("the failed check is not counted as a Redis error:\n%s", grepLines(metrics, "redis_errors"))
	}

	// Redis cannot confirm a decision: the instances are not ready.
	readyAs(t, closed, nil, 503, "noreplicas", readyOffWithin)

	d.Resume(replica)
	checkUntilOK(t, closed.URL+"/api/v1/check?policy=api", 10*time.Second)
	readyAs(t, closed, nil, 200, "up", readyOnWithin)
}
