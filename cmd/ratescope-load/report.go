package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ratescope/ratescope/internal/buildinfo"
)

// report collects the Markdown report section by section.
type report struct{ b strings.Builder }

func (r *report) line(format string, args ...any) { fmt.Fprintf(&r.b, format+"\n", args...) }
func (r *report) String() string                  { return r.b.String() }

// machine describes where the run happens, for the report's header.
type machine struct {
	cpu      string // model name from /proc/cpuinfo
	cores    int
	goVer    string
	revision string // the VCS revision the tool was built from, when stamped
}

func describeMachine() machine {
	m := machine{cpu: "unknown CPU", cores: runtime.NumCPU(), goVer: strings.TrimPrefix(runtime.Version(), "go"), revision: "not stamped (go run)"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if name, ok := strings.CutPrefix(l, "model name"); ok {
				m.cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	if c := buildinfo.Read().Commit; c != "unknown" {
		rev, dirty := strings.CutSuffix(c, "-dirty")
		m.revision = rev[:min(len(rev), 12)]
		if dirty {
			m.revision += " (modified)"
		}
	}
	return m
}

func (r *report) header(o options, m machine) {
	r.line("# ratescope-load report, %s", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	r.line("")
	r.line("- machine: %s, %d cores; Go %s; build %s", m.cpu, m.cores, m.goVer, m.revision)
	r.line("- the load generator, the server process and redis-server all share these %d cores:", m.cores)
	r.line("  every figure is a lower bound of what a server with the machine to itself would do")
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		r.line("- load average at the start (1, 5, 15 min): %s — other work on the machine skews every figure", strings.Join(strings.Fields(string(b))[:3], ", "))
	}
	r.line("- flags: --duration %s --rounds %d --conns %d --keys %d --pipeline %d --viewers %s --checks %d --check-interval %s --tick-interval %s",
		o.duration, o.rounds, o.conns, o.keys, o.pipeline, o.viewers.String(), o.checks, o.checkInterval, o.tickInterval)
	r.line("- throughput phases interleave their variants: %d rounds of %s each, every variant once per round, so drift on a shared machine hits all alike; rates and ratios are medians over the rounds (min–max alongside)",
		o.rounds, o.slice())
}

// latencies summarises durations.
type latencies []time.Duration

// sorted returns a sorted copy, so percentiles can be read from it.
func (l latencies) sorted() latencies {
	s := slices.Clone(l)
	slices.Sort(s)
	return s
}

// pct reads the p-quantile (0 ≤ p ≤ 1) of a sorted list.
func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(len(l)-1, int(float64(len(l))*p))]
}

// cells gives "p50 | p90 | p99 | max" table cells.
func (l latencies) cells() string {
	s := l.sorted()
	return fmt.Sprintf("%s | %s | %s | %s", ms(s.pct(.50)), ms(s.pct(.90)), ms(s.pct(.99)), ms(s.pct(1)))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// verdict says whether got meets a "≥ want" target.
func verdict(got, want float64) string {
	if got >= want {
		return "met"
	}
	return "**not met**"
}

// atMost says whether got meets a "≤ want" target.
func atMost(got, want float64) string {
	if got <= want {
		return "met"
	}
	return "**not met**"
}

// median of xs (0 when empty).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread gives "min–max" of xs with the given format.
func spread(format string, xs []float64) string {
	if len(xs) == 0 {
		return ""
	}
	return fmt.Sprintf(format+"–"+format, slices.Min(xs), slices.Max(xs))
}

// ratios divides a[i] by b[i], round by round.
func ratios(a, b []float64) []float64 {
	r := make([]float64, min(len(a), len(b)))
	for i := range r {
		r[i] = a[i] / b[i]
	}
	return r
}
