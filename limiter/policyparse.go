package limiter

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Reading policies from their text: NAME=RULE[,RULE…][+OPTION…], as flags,
// environment and config files give them (ParsePolicy, ParsePolicies).

var policyName = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// policyOptions are the options that may follow a policy's rules,
// "+NAME" or "+NAME=VALUE", in any order with "@ALGORITHM", each at most
// once: one row per option, so each is parsed in one place and carried by
// the Policy to the script that decides.
var policyOptions = map[string]func(p *Policy, value string, given bool) error{
	"shadow": func(p *Policy, _ string, given bool) error {
		if given {
			return errors.New("takes no value")
		}
		p.Shadow = true
		return nil
	},
	"lock": durationOption(MinLock, MaxLock, time.Second, "want whole seconds from 1s to 24h, e.g. +lock=15m",
		func(p *Policy, d time.Duration) { p.Lock = d }),
	"tz": func(p *Policy, v string, given bool) error {
		if !given || v == "" {
			return errors.New("want an IANA time zone, e.g. +tz=Europe/Berlin")
		}
		if _, err := loadZone(v); err != nil {
			return err
		}
		p.Timezone = v
		return nil
	},
	"lease": durationOption(MinLease, MaxLease, time.Millisecond, "want whole milliseconds from 1s to 24h, e.g. +lease=45s",
		func(p *Policy, d time.Duration) { p.Lease = d }),
}

// durationOption is an option whose value is a duration from lo to hi in
// whole units; want is its error.
func durationOption(lo, hi, unit time.Duration, want string, set func(*Policy, time.Duration)) func(*Policy, string, bool) error {
	return func(p *Policy, v string, given bool) error {
		d, err := time.ParseDuration(v)
		if !given || err != nil || d < lo || d > hi || d%unit != 0 {
			return errors.New(want)
		}
		set(p, d)
		return nil
	}
}

// ParsePolicy reads NAME=RULE[,RULE…] followed, in any order, by
// [@ALGORITHM], [+shadow], [+lock=DURATION], [+tz=ZONE] and
// [+lease=DURATION], e.g. "login=5/1m,20/1h", "api=1000/1m@gcra",
// "search=50/10s+shadow", "login=5/15m+lock=15m",
// "api=10/1s,100000/month+tz=America/New_York", "jobs=4/inflight+lease=45s".
// A RULE is LIMIT/WINDOW, WINDOW a Go duration of whole seconds from 1s to
// 7 days (168h), LIMIT 1 to its algorithm's Descriptor.MaxLimit (100,000
// for log, 10,000,000 for the others); or a calendar quota LIMIT/day,
// LIMIT/week or LIMIT/month, LIMIT 1 to MaxLimit whatever the algorithm (a
// quota is one counter per period, not an entry per request). A window or
// a period may appear once. ALGORITHM is one of Algorithms (default log);
// ZONE an IANA time zone for the quotas' periods (default UTC).
//
// A rule LIMIT/inflight (LIMIT 1 to MaxInFlight) limits requests in flight
// instead: the policy's algorithm is then InFlight, the rule its only one,
// and +lease=DURATION (whole milliseconds from MinLease to MaxLease, default
// DefaultLease) how long a lease lasts unless renewed; +lease= needs such a
// rule, and +shadow, +lock= and +tz= do not apply to one.
func ParsePolicy(s string) (Policy, error) {
	name, rest, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return Policy{}, fmt.Errorf("policy %q: want NAME=LIMIT/WINDOW[,LIMIT/WINDOW…][@ALGORITHM][+shadow][+lock=DURATION][+tz=ZONE] or NAME=LIMIT/inflight[+lease=DURATION], e.g. login=5/1m,20/1h", s)
	}
	name = strings.TrimSpace(name)
	if !policyName.MatchString(name) {
		return Policy{}, fmt.Errorf("policy %q: name %q must be 1-32 characters of a-z 0-9 _ -", s, name)
	}
	p := Policy{Name: name, Algorithm: Log}
	rules, options := rest, ""
	if i := strings.IndexAny(rest, "@+"); i >= 0 {
		rules, options = rest[:i], rest[i:]
	}
	hasAlg, err := p.parseOptions(options)
	if err != nil {
		return Policy{}, fmt.Errorf("policy %q: %w", name, err)
	}
	maxLimit := MaxInFlight // @inflight: parseInFlight says what else it needs
	if p.Algorithm != InFlight {
		desc, known := Describe(p.Algorithm)
		if !known {
			return Policy{}, fmt.Errorf("policy %q: algorithm %q must be one of %s", name, p.Algorithm, AlgorithmNames())
		}
		maxLimit = desc.MaxLimit
	}
	for part := range strings.SplitSeq(rules, ",") {
		r, err := parseRule(strings.TrimSpace(part), maxLimit)
		if err != nil {
			if hasAlg {
				err = fmt.Errorf("%w for @%s", err, p.Algorithm)
			}
			return Policy{}, fmt.Errorf("policy %q: %w", name, err)
		}
		if slices.ContainsFunc(p.Rules, func(o Rule) bool {
			return o.Window == r.Window && o.Period == r.Period && o.InFlight == r.InFlight
		}) {
			if r.InFlight {
				return Policy{}, fmt.Errorf("policy %q: inflight appears twice", name)
			}
			if r.Period != "" {
				return Policy{}, fmt.Errorf("policy %q: period %s appears twice", name, r.Period)
			}
			return Policy{}, fmt.Errorf("policy %q: window %s appears twice", name, r.Window)
		}
		p.Rules = append(p.Rules, r)
	}
	if err := p.parseInFlight(hasAlg); err != nil {
		return Policy{}, fmt.Errorf("policy %q: %w", name, err)
	}
	slices.SortFunc(p.Rules, compareRules)
	return p, nil
}

// compareRules orders a policy's rules: the windows, shortest first, then
// the quotas, day, week, month.
func compareRules(a, b Rule) int {
	if c := a.Period.order() - b.Period.order(); c != 0 {
		return c
	}
	return int(a.Window - b.Window)
}

// parseOptions reads what follows the rules: "@ALGORITHM" and the
// policyOptions, each once, in any order. It reports whether an algorithm
// was named.
func (p *Policy) parseOptions(s string) (hasAlg bool, err error) {
	seen := map[string]bool{}
	for s != "" {
		kind := s[0]
		tok := s[1:]
		if i := strings.IndexAny(tok, "@+"); i >= 0 {
			tok, s = tok[:i], tok[i:]
		} else {
			s = ""
		}
		// A zone may hold a '+' before digits (Etc/GMT+5); no option's
		// name starts with a digit.
		for len(s) > 1 && s[0] == '+' && s[1] >= '0' && s[1] <= '9' {
			more := s[1:]
			if i := strings.IndexAny(more, "@+"); i >= 0 {
				tok, s = tok+"+"+more[:i], more[i:]
			} else {
				tok, s = tok+"+"+more, ""
			}
		}
		tok = strings.TrimSpace(tok)
		if kind == '@' {
			if hasAlg {
				return true, fmt.Errorf("@ALGORITHM appears twice (@%s, @%s)", p.Algorithm, tok)
			}
			hasAlg, p.Algorithm = true, Algorithm(tok)
			continue
		}
		opt, value, given := strings.Cut(tok, "=")
		opt = strings.TrimSpace(opt)
		parse, known := policyOptions[opt]
		switch {
		case !known:
			return hasAlg, fmt.Errorf("suffix %q: the options are +shadow, +lock=DURATION, +tz=ZONE and +lease=DURATION, after the rules", "+"+tok)
		case seen[opt]:
			return hasAlg, fmt.Errorf("option +%s appears twice", opt)
		}
		seen[opt] = true
		if err := parse(p, strings.TrimSpace(value), given); err != nil {
			return hasAlg, fmt.Errorf("option %q: %w", "+"+tok, err)
		}
	}
	return hasAlg, nil
}

// parseWindow reads a sliding window: a Go duration, or whole days ("1d",
// "7d") as people write them — a sliding day, unlike the calendar "day".
func parseWindow(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 7 {
			return 0, errors.New("want 1d to 7d")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

func parseRule(s string, maxLimit int) (Rule, error) {
	ls, ws, ok := strings.Cut(s, "/")
	if !ok {
		return Rule{}, fmt.Errorf("rule %q: want LIMIT/WINDOW, e.g. 5/1m, or LIMIT/day, LIMIT/week, LIMIT/month", s)
	}
	ws = strings.TrimSpace(ws)
	if pd := Period(ws); pd.order() >= 0 {
		// A quota is one counter per period whatever the algorithm.
		maxLimit = MaxLimit
	}
	if ws == inFlightRule {
		maxLimit = MaxInFlight // a lease per request in flight, whatever else the policy says
	}
	limit, err := strconv.Atoi(strings.TrimSpace(ls))
	if err != nil || limit < 1 || limit > maxLimit {
		return Rule{}, fmt.Errorf("rule %q: limit must be a whole number from 1 to %d", s, maxLimit)
	}
	if pd := Period(ws); pd.order() >= 0 {
		return Rule{Limit: limit, Period: pd}, nil
	}
	if ws == inFlightRule {
		return Rule{Limit: limit, InFlight: true}, nil
	}
	w, err := parseWindow(ws)
	if err != nil {
		return Rule{}, fmt.Errorf("rule %q: window must be a Go duration such as 10s, 1m or 24h (or whole days: 1d … 7d), one of day, week, month, or inflight", s)
	}
	if w < MinWindow || w > MaxWindow || w%time.Second != 0 {
		return Rule{}, fmt.Errorf("rule %q: window must be whole seconds from 1s to 168h (7 days)", s)
	}
	return Rule{Limit: limit, Window: w}, nil
}

// ParsePolicies parses every spec, in order, skipping blank ones. A malformed
// spec or a name defined twice is an error that names it. It adds nothing:
// policies a program wants to exist unless configured (ratescope's server has
// "default" and "demo") are that program's to add.
func ParsePolicies(specs []string) ([]Policy, error) {
	var out []Policy
	seen := map[string]bool{}
	for _, s := range specs {
		if strings.TrimSpace(s) == "" {
			continue
		}
		p, err := ParsePolicy(s)
		if err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("policy %q is defined twice", p.Name)
		}
		seen[p.Name] = true
		out = append(out, p)
	}
	return out, nil
}
