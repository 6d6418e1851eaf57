// Command fanprobe measures a WebSocket fan-out from outside: it knows servers only
// by their URLs, connects N viewers to each, sends checks over HTTP and times each
// check's decision until every viewer has read it. It shares no code with ratescope
// (only coder/websocket and the standard library), so it checks the load tool's
// own fan-out figures rather than repeating them.
//
// It also is the bar those figures are held to: "fanprobe minimal" is the least a
// coder/websocket server does to broadcast — viewers in a map under a mutex, a
// buffered channel and a writer goroutine each, and per check one frame, encoded
// once, to every viewer. No ticks, no snapshots, no Redis.
//
//	fanprobe minimal --addr 127.0.0.1:9100
//	fanprobe --server ratescope=http://127.0.0.1:8080 --server minimal=http://127.0.0.1:9100 \
//	    --viewers 2000 --checks 200 --rounds 3
//
// A round measures every server once, one after the other (the order turns each
// round), with fresh connections and a fresh window. For ratescope the window is
// --policy with a key of the round's own; ratescope must let one client open that
// many viewers (--max-viewers-per-client 0).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "minimal" {
		os.Exit(minimalMain(os.Args[2:]))
	}
	os.Exit(probeMain(os.Args[1:]))
}

// servers is --server NAME=URL, repeatable, in order.
type servers []target

type target struct{ name, url string }

func (s *servers) String() string { return fmt.Sprint(*s) }

func (s *servers) Set(v string) error {
	name, url, ok := strings.Cut(v, "=")
	if !ok || name == "" || !strings.HasPrefix(url, "http://") {
		return fmt.Errorf("want NAME=http://HOST:PORT, got %q", v)
	}
	*s = append(*s, target{name, strings.TrimSuffix(url, "/")})
	return nil
}

type options struct {
	servers  servers
	viewers  int
	checks   int
	interval time.Duration
	rounds   int
	policy   string
	settle   time.Duration
	series   bool
	timeout  time.Duration
}

func probeMain(args []string) int {
	var o options
	fs := flag.NewFlagSet("fanprobe", flag.ContinueOnError)
	fs.Var(&o.servers, "server", "a server to measure, NAME=http://HOST:PORT (repeat; at least one)")
	fs.IntVar(&o.viewers, "viewers", 2000, "viewers connected to one window of each server")
	fs.IntVar(&o.checks, "checks", 200, "checks timed per server and round")
	fs.DurationVar(&o.interval, "interval", 100*time.Millisecond, "time from one check's sending to the next one's")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds; each measures every server once")
	fs.StringVar(&o.policy, "policy", "fan", "the policy of ratescope's window (it must allow every check)")
	fs.DurationVar(&o.settle, "settle", 2*time.Second, "how long viewers sit connected before the first check")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "the longest a decision is waited for; one later is counted missing")
	fs.BoolVar(&o.series, "series", false, "print each check's time to the last viewer (check:ms) on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if len(o.servers) == 0 || o.viewers < 1 || o.checks < 1 || o.rounds < 1 {
		fmt.Fprintln(os.Stderr, "fanprobe: want at least one --server, and --viewers, --checks, --rounds of at least 1")
		return 2
	}
	raiseFileLimit()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := probe(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "fanprobe:", err)
		return 1
	}
	return 0
}

// result is one server's round.
type result struct {
	last    []time.Duration // per check: until the last viewer had it
	each    []time.Duration // per delivery
	missing int
}

func probe(ctx context.Context, o options) error {
	byServer, err := run(ctx, o)
	if err != nil {
		return err
	}
	report(o, byServer)
	return nil
}

// run measures every server in every round.
func run(ctx context.Context, o options) (map[string][]result, error) {
	byServer := map[string][]result{}
	order := slices.Clone(o.servers)
	for round := range o.rounds {
		for _, s := range order {
			fmt.Fprintf(os.Stderr, "round %d: %s, %d viewers…\n", round+1, s.name, o.viewers)
			r, err := measure(ctx, o, s, round)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", s.name, round+1, err)
			}
			byServer[s.name] = append(byServer[s.name], r)
			fmt.Fprintf(os.Stderr, "  last viewer p50 %s p99 %s; any viewer p99 %s; missing %d\n",
				ms(pct(r.last, .5)), ms(pct(r.last, .99)), ms(pct(r.each, .99)), r.missing)
		}
		slices.Reverse(order)
	}
	return byServer, nil
}

// report prints the rounds as a table and each server's p99 as a ratio to the
// last server's in the same round.
func report(o options, byServer map[string][]result) {
	fmt.Printf("%d viewers, %d checks %s apart per server and round, %d rounds; check → the last viewer to read its decision\n\n",
		o.viewers, o.checks, o.interval, o.rounds)
	fmt.Printf("| server | round | p50 | p90 | p99 | any viewer p99 | missing |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range o.servers {
		for i, r := range byServer[s.name] {
			fmt.Printf("| %s | %d | %s | %s | %s | %s | %d |\n", s.name, i+1,
				ms(pct(r.last, .5)), ms(pct(r.last, .9)), ms(pct(r.last, .99)), ms(pct(r.each, .99)), r.missing)
		}
	}
	if len(o.servers) < 2 {
		return
	}
	base := o.servers[len(o.servers)-1]
	fmt.Printf("\np99 of the last viewer ÷ %s's in the same round:\n\n", base.name)
	for _, s := range o.servers[:len(o.servers)-1] {
		var ratios []string
		for i, r := range byServer[s.name] {
			ratios = append(ratios, fmt.Sprintf("%.2f", float64(pct(r.last, .99))/float64(pct(byServer[base.name][i].last, .99))))
		}
		fmt.Printf("- %s: %s\n", s.name, strings.Join(ratios, ", "))
	}
}

// measure connects the viewers to one window of s, then times the checks.
func measure(ctx context.Context, o options, s target, round int) (result, error) {
	key := fmt.Sprintf("probe-%d-%d", time.Now().UnixNano(), round)
	ws := "ws" + strings.TrimPrefix(s.url, "http") + "/ws?policy=" + o.policy + "&key=" + key
	check := s.url + "/api/v1/check?policy=" + o.policy + "&key=" + key

	vctx, cancel := context.WithCancel(ctx)
	var readers sync.WaitGroup
	defer func() { cancel(); readers.Wait() }()
	c := &crowd{}
	if err := c.connect(vctx, ws, o.viewers, &readers); err != nil {
		return result{}, err
	}
	if err := sleep(ctx, o.settle); err != nil {
		return result{}, err
	}
	return c.time(ctx, o, check)
}

// viewer is one connection; arrivals maps decision ids to when they were read.
type viewer struct {
	mu       sync.Mutex
	arrivals map[string]time.Time
}

type crowd struct {
	viewers []*viewer
	read    atomic.Int64 // decisions read, all viewers together
	gone    atomic.Int64 // streams that ended early
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
	for k := range o.checks {
		if err := sleep(ctx, time.Until(start.Add(time.Duration(k)*o.interval))); err != nil {
			return r, err
		}
		before := c.read.Load()
		t0 := time.Now()
		id, err := post(ctx, client, url)
		if err != nil {
			return r, fmt.Errorf("check %d: %w", k+1, err)
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
	if n := c.gone.Load(); n > 0 {
		return r, fmt.Errorf("%d viewers' streams ended during the checks", n)
	}
	return r, nil
}

// post sends one check and returns its decision's id; a check that is not
// allowed is an error, as the probe times only decisions it can follow.
func post(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var d struct {
		Allowed bool   `json:"allowed"`
		ID      string `json:"id"`
	}
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &d); err != nil || !d.Allowed || d.ID == "" {
		return "", fmt.Errorf("not an allowed check with an id (%s): %.200s", resp.Status, body)
	}
	return d.ID, nil
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

// pct is the p-th quantile of ds (nearest rank).
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// raiseFileLimit lets the probe hold thousands of sockets.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// The minimal server.

type minimal struct {
	mu      sync.Mutex
	viewers map[chan []byte]struct{}
	seq     atomic.Int64
}

func minimalMain(args []string) int {
	fs := flag.NewFlagSet("fanprobe minimal", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	raiseFileLimit()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanprobe minimal:", err)
		return 1
	}
	fmt.Println("http://" + ln.Addr().String())
	srv := &http.Server{Handler: newMinimal(), ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "fanprobe minimal:", err)
		return 1
	}
	return 0
}

func newMinimal() http.Handler {
	m := &minimal{viewers: map[chan []byte]struct{}{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", m.watch)
	mux.HandleFunc("POST /api/v1/check", m.check)
	mux.HandleFunc("GET /healthz", func(http.ResponseWriter, *http.Request) {})
	return mux
}

// check makes one decision frame, encoded once, and queues it for every viewer.
func (m *minimal) check(w http.ResponseWriter, r *http.Request) {
	id := fmt.Sprintf("%016x-%d", time.Now().UnixNano(), m.seq.Add(1))
	now := time.Now().UnixMilli()
	frame := fmt.Appendf(nil, `{"type":"decision","key":%q,"policy":%q,"allowed":true,"count":1,"limit":100000,"nowMs":%d,"oldestMs":%d,"retryAfterMs":0,"id":%q,"instance":"minimal"}`,
		r.URL.Query().Get("key"), r.URL.Query().Get("policy"), now, now, id)
	m.mu.Lock()
	for ch := range m.viewers {
		select {
		case ch <- frame:
		default: // a viewer 64 frames behind misses this one
		}
	}
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"allowed":true,"id":%q}`, id)
}

// watch writes every frame queued for this viewer until it leaves.
func (m *minimal) watch(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := c.CloseRead(context.Background())
	ch := make(chan []byte, 64)
	m.mu.Lock()
	m.viewers[ch] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.viewers, ch)
		m.mu.Unlock()
	}()
	for {
		select {
		case frame := <-ch:
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := c.Write(wctx, websocket.MessageText, frame)
			cancel()
			if err != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}
