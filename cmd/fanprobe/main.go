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
//
// A check not answered 200 (a 503 when the server's viewers starve its checks,
// a 429, no answer at all) has no decision to follow: it is counted by answer in
// the table's last column, and fanprobe exits 1 once it has printed the table.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
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
	last     []time.Duration // per check: until the last viewer had it
	each     []time.Duration // per delivery
	answered []time.Duration // per check: until its HTTP answer
	missing  int
	// failed counts the checks not answered 200, by answer ("503", "error"):
	// a server whose viewers cost its checks their answers fails the probe.
	failed map[string]int
	// frames and ticks are what a viewer read a second during the checks,
	// on average: a server that sheds its clock under load shows it here.
	frames, ticks float64
}

func (r *result) fail(answer string) {
	if r.failed == nil {
		r.failed = map[string]int{}
	}
	r.failed[answer]++
}

// failures is how many checks were not answered 200.
func (r result) failures() int {
	n := 0
	for _, c := range r.failed {
		n += c
	}
	return n
}

// answers says which checks were not answered 200: "0", or e.g. "8 (8 × 503)".
func (r result) answers() string {
	n := r.failures()
	if n == 0 {
		return "0"
	}
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(r.failed)) {
		parts = append(parts, fmt.Sprintf("%d × %s", r.failed[a], a))
	}
	return fmt.Sprintf("%d (%s)", n, strings.Join(parts, ", "))
}

// probe measures and reports; it fails when any check was not answered 200,
// after the report, so the table shows which server and round.
func probe(ctx context.Context, o options) error {
	byServer, err := run(ctx, o)
	if err != nil {
		return err
	}
	report(o, byServer)
	failed := 0
	for _, rs := range byServer {
		for _, r := range rs {
			failed += r.failures()
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d checks were not answered 200", failed, o.checks*o.rounds*len(o.servers))
	}
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
			fmt.Fprintf(os.Stderr, "  last viewer p50 %s p99 %s; any viewer p99 %s; missing %d; checks answered p99 %s, not 200: %s; a viewer read %.1f frames and %.2f ticks a second\n",
				ms(pct(r.last, .5)), ms(pct(r.last, .99)), ms(pct(r.each, .99)), r.missing, ms(pct(r.answered, .99)), r.answers(), r.frames, r.ticks)
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
	fmt.Printf("| server | round | p50 | p90 | p99 | any viewer p99 | missing | checks not 200 | ticks/s a viewer |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range o.servers {
		for i, r := range byServer[s.name] {
			fmt.Printf("| %s | %d | %s | %s | %s | %s | %d | %s | %.2f |\n", s.name, i+1,
				ms(pct(r.last, .5)), ms(pct(r.last, .9)), ms(pct(r.last, .99)), ms(pct(r.each, .99)), r.missing, r.answers(), r.ticks)
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
