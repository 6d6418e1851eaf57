package envoyconf

import (
	"fmt"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/conffile"
)

// envoyAlgorithm is how envoyproxy/ratelimit decides every limit: fixed
// windows. Files are decided so under Options.Compat, and a limit the log
// cannot hold falls back to it.
const envoyAlgorithm = limiter.Fixed

// The bounds of each algorithm are the algorithm table's
// (limiter.Descriptor's ExactLimit and ExactWindow), not a spec's: a file's
// requests_per_unit is any uint32 and its unit may be a month or a year,
// and a policy built here may use whatever its algorithm decides exactly.

// bound keeps a limit within what its algorithm decides exactly. A limit
// beyond the algorithm a file chose is refused; beyond the log, which a file
// gets when it names none, it is decided by envoyAlgorithm (as
// envoyproxy/ratelimit decides every limit), with a warning.
func (b *builder) bound(p *parser, l *Limit, y *yamlLimit, rules leafRules) {
	r := l.Policy.Rules[0]
	d, _ := limiter.Describe(l.Policy.AlgorithmName())
	if r.Limit > d.ExactLimit {
		if rules.explicit {
			p.fail(y.path.member("requests_per_unit"), y.line, "%d is more than %s (%d)%s", r.Limit, takes(d), d.ExactLimit, otherAlgorithm(d))
		} else {
			b.fallBack(p, l, y, d)
			d, _ = limiter.Describe(envoyAlgorithm)
		}
	}
	if d.ExactWindow > 0 && r.Window > d.ExactWindow {
		p.fail(y.path.member("unit"), y.unitLine, "%s is longer than %s (%s)", strings.ToLower(l.Unit.String()), takes(d), spellWindow(d.ExactWindow))
	}
}

// fallBack has envoyAlgorithm decide l, whose limit d cannot hold, and warns
// of it.
func (b *builder) fallBack(p *parser, l *Limit, y *yamlLimit, d limiter.Descriptor) {
	l.Policy.Algorithm, l.Policy.CountDenied = envoyAlgorithm, b.opts.Compat
	if len(b.set.warnings) >= conffile.MaxListed {
		b.moreWarnings++
		return
	}
	b.set.warnings = append(b.set.warnings, fmt.Sprintf("%s: %s.requests_per_unit: %d is more than %s (%d); %s is decided by fixed windows",
		p.file, y.path, l.Policy.Rules[0].Limit, takes(d), d.ExactLimit, l.Policy.Name))
}

// cannotHold reports whether p's algorithm keeps an entry per request and
// its limit is more than it can keep: such a limit, an override's, is
// decided by envoyAlgorithm, as a file's would be. (An override's limit
// beyond the other algorithms' exact bound is left to them: it cannot be
// refused, and they keep a few numbers whatever the limit.) A calendar
// quota is a counter under any algorithm: no limit of one is too large.
func cannotHold(p limiter.Policy) bool {
	d, ok := limiter.Describe(p.AlgorithmName())
	return ok && d.Entries && slices.ContainsFunc(p.Rules, func(r limiter.Rule) bool { return r.Period == "" && r.Limit > d.ExactLimit })
}

// takes says what bounds an algorithm: "the log keeps" (an entry per
// request), "gcra takes".
func takes(d limiter.Descriptor) string {
	if d.Entries {
		return "the " + string(d.Name) + " keeps"
	}
	return string(d.Name) + " takes"
}

// otherAlgorithm is the advice after a limit the log cannot keep.
func otherAlgorithm(d limiter.Descriptor) string {
	if d.Entries {
		return "; choose another algorithm:"
	}
	return ""
}

// spellWindow names a window as the files do when it is one unit ("a
// week"), else as a policy does.
func spellWindow(w time.Duration) string {
	for u := range rlsv3.RateLimitResponse_RateLimit_Unit_name {
		if l, ok := UnitLength(Unit(u)); ok && l == w {
			name := strings.ToLower(Unit(u).String())
			if strings.ContainsRune("aeiou", rune(name[0])) {
				return "an " + name
			}
			return "a " + name
		}
	}
	return limiter.WindowString(w)
}
