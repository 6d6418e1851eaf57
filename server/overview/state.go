package overview

import "math"

// State is the overview of one policy at one moment: every policy's rates
// and the chosen policy's top lists, across the instances heard from. It is
// the answer of GET /api/v1/overview and, with a type, the stream's message.
type State struct {
	Policy    string        `json:"policy"` // whose top lists these are
	Policies  []PolicyRates `json:"policies"`
	Top       Top           `json:"top"`
	NowMs     int64         `json:"nowMs"`
	Instances int           `json:"instances"` // this one and the others whose counts are merged
}

// PolicyRates are one policy's decisions per second, averaged over the last
// Seconds whole seconds: allowed, denied (an enforced policy's denials, those
// of the deny cache included), shadowDenied (a shadow policy's would-denials)
// and cached (the denials the deny cache answered). Series holds the counts
// of each of those seconds, for a sparkline.
type PolicyRates struct {
	Name         string  `json:"name"`
	Shadow       bool    `json:"shadow"`
	Allowed      float64 `json:"allowed"`
	Denied       float64 `json:"denied"`
	ShadowDenied float64 `json:"shadowDenied"`
	Cached       float64 `json:"cached"`
	Series       Series  `json:"series"`
}

// Series are a policy's decisions in each of the last Seconds whole
// seconds, oldest first.
type Series struct {
	Allowed      []int64 `json:"allowed"`
	Denied       []int64 `json:"denied"`
	ShadowDenied []int64 `json:"shadowDenied"`
	Cached       []int64 `json:"cached"`
}

func newSeries(n int) Series {
	return Series{Allowed: make([]int64, n), Denied: make([]int64, n), ShadowDenied: make([]int64, n), Cached: make([]int64, n)}
}

// rates sets r's averages from its series.
func (r *PolicyRates) rates() {
	perSecond := func(counts []int64) float64 {
		var sum int64
		for _, n := range counts {
			sum += n
		}
		return math.Round(float64(sum)*100/float64(max(len(counts), 1))) / 100
	}
	r.Allowed, r.Denied = perSecond(r.Series.Allowed), perSecond(r.Series.Denied)
	r.ShadowDenied, r.Cached = perSecond(r.Series.ShadowDenied), perSecond(r.Series.Cached)
}

// series returns p's counts of the n seconds ending at end, oldest first.
func (p *policyCounts) series(end int64, n int) wireRates {
	r := wireRates(newSeries(n))
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range n {
		sec := end - int64(n-1-i)
		if s := &p.seconds[sec%secondRing]; s.at == sec && sec > 0 {
			r.Allowed[i], r.Denied[i], r.ShadowDenied[i], r.Cached[i] = s.allowed, s.denied, s.shadowDenied, s.cached
		}
	}
	return r
}

// busy reports whether a series counted anything.
func (r wireRates) busy() bool {
	for i := range r.Allowed {
		if r.Allowed[i]+r.Denied[i]+r.ShadowDenied[i] > 0 {
			return true
		}
	}
	return false
}

// addTo adds r, which ends at second end, into rates, which end at last.
func (r wireRates) addTo(rates *Series, end, last int64) {
	add := func(dst, src []int64) {
		for i := range dst {
			j := len(src) - 1 - int(end-(last-int64(len(dst)-1-i)))
			if j >= 0 && j < len(src) {
				dst[i] += src[j]
			}
		}
	}
	add(rates.Allowed, r.Allowed)
	add(rates.Denied, r.Denied)
	add(rates.ShadowDenied, r.ShadowDenied)
	add(rates.Cached, r.Cached)
}
