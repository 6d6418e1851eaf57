package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// viewer is one connection; arrivals maps decision ids to when they were read.
type viewer struct {
	mu       sync.Mutex
	arrivals map[string]time.Time
}

type crowd struct {
	viewers []*viewer
	read    atomic.Int64 // decisions read, all viewers together
	gone    atomic.Int64 // streams that ended early
	frames  atomic.Int64 // frames read, all viewers together
	ticks   atomic.Int64 // tick messages read (ratescope's clock)
}

func (c *crowd) connect(ctx context.Context, url string, n int, readers *sync.WaitGroup) error {
	c.viewers = make([]*viewer, n)
	client := &http.Client{Timeout: 10 * time.Second}
	var next atomic.Int64
	var first error
	var once sync.Once
	var dialers sync.WaitGroup
	for range 16 {
		dialers.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: client})
				if err != nil {
					once.Do(func() { first = fmt.Errorf("viewer %d: %w", i+1, err) })
					return
				}
				conn.SetReadLimit(4 << 20)
				v := &viewer{arrivals: map[string]time.Time{}}
				c.viewers[i] = v
				readers.Go(func() { c.listen(ctx, conn, v) })
			}
		})
	}
	dialers.Wait()
	return first
}

var (
	tickType     = []byte(`"type":"tick"`)
	decisionType = []byte(`"type":"decision"`)
	idField      = []byte(`"id":"`)
)

// listen reads one viewer's frames; a frame is a message or an array of them,
// and only decisions are looked at (the id follows the type in both servers'
// encodings; the probe checks that every id it sent came back).
func (c *crowd) listen(ctx context.Context, conn *websocket.Conn, v *viewer) {
	defer conn.CloseNow()
	var buf bytes.Buffer
	for {
		_, r, err := conn.Reader(ctx)
		if err == nil {
			buf.Reset()
			_, err = buf.ReadFrom(r)
		}
		if err != nil {
			if ctx.Err() == nil {
				c.gone.Add(1)
			}
			return
		}
		at := time.Now()
		b := buf.Bytes()
		c.frames.Add(1)
		c.ticks.Add(int64(bytes.Count(b, tickType)))
		for {
			i := bytes.Index(b, decisionType)
			if i < 0 {
				break
			}
			b = b[i+len(decisionType):]
			j := bytes.Index(b, idField)
			if j < 0 {
				break
			}
			b = b[j+len(idField):]
			k := bytes.IndexByte(b, '"')
			if k < 0 {
				break
			}
			v.mu.Lock()
			v.arrivals[string(b[:k])] = at
			v.mu.Unlock()
			c.read.Add(1)
			b = b[k:]
		}
	}
}

// time sends o.checks checks, each o.interval after the one before, and reads
// each one's arrivals once every viewer has it or o.timeout has passed.
func (c *crowd) time(ctx context.Context, o options, url string) (result, error) {
	var r result
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	start := time.Now()
	frames0, ticks0 := c.frames.Load(), c.ticks.Load()
	for k := range o.checks {
		if err := sleep(ctx, time.Until(start.Add(time.Duration(k)*o.interval))); err != nil {
			return r, err
		}
		before := c.read.Load()
		t0 := time.Now()
		id, answer, err := post(ctx, client, url)
		if err != nil {
			return r, fmt.Errorf("check %d: %w", k+1, err)
		}
		r.answered = append(r.answered, time.Since(t0))
		if answer != "" { // not answered 200: counted, and there is no decision to time
			r.fail(answer)
			if o.series {
				fmt.Fprintf(os.Stderr, "%d:%s ", k+1, answer)
			}
			continue
		}
		deadline := t0.Add(o.timeout)
		for c.read.Load()-before < int64(len(c.viewers))-c.gone.Load() && time.Now().Before(deadline) {
			if err := sleep(ctx, 100*time.Microsecond); err != nil {
				return r, err
			}
		}
		var worst time.Duration
		for _, v := range c.viewers {
			v.mu.Lock()
			at, ok := v.arrivals[id]
			clear(v.arrivals)
			v.mu.Unlock()
			if !ok {
				r.missing++
				continue
			}
			r.each = append(r.each, at.Sub(t0))
			worst = max(worst, at.Sub(t0))
		}
		r.last = append(r.last, worst)
		if o.series {
			fmt.Fprintf(os.Stderr, "%d:%d ", k+1, worst.Milliseconds())
		}
	}
	// What each viewer read a second while the checks ran.
	per := float64(len(c.viewers)) * time.Since(start).Seconds()
	r.frames, r.ticks = float64(c.frames.Load()-frames0)/per, float64(c.ticks.Load()-ticks0)/per
	if n := c.gone.Load(); n > 0 {
		return r, fmt.Errorf("%d viewers' streams ended during the checks", n)
	}
	return r, nil
}

// post sends one check and returns its decision's id, or the answer when the
// check was not answered 200 with an allowed decision ("503", "429", or
// "error" for no answer at all): such a check is counted, not timed, as it has
// no decision to follow. Only the probe's own cancellation is an error.
func post(ctx context.Context, client *http.Client, url string) (id, answer string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return "", "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", "", ctx.Err()
		}
		return "", "error", nil
	}
	defer resp.Body.Close()
	var d struct {
		Allowed bool   `json:"allowed"`
		ID      string `json:"id"`
	}
	body, _ := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode != http.StatusOK:
		return "", strconv.Itoa(resp.StatusCode), nil
	case json.Unmarshal(body, &d) != nil || !d.Allowed || d.ID == "":
		return "", "200 without an allowed decision", nil
	}
	return d.ID, "", nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
