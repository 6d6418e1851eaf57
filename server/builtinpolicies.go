package server

import (
	"slices"
	"strings"

	"github.com/ratescope/ratescope/limiter"
)

// The policies the server has unless a configuration redefines them (SPEC
// §1): the product's defaults, kept here rather than in the public limiter,
// which parses exactly the policies it is given.
const (
	// defaultPolicy decides for callers that name no policy.
	defaultPolicy = "default"
	// sandboxPolicy is the public policy: anyone may check, watch, reset and
	// race it, and the page opens on it.
	sandboxPolicy = "demo"
)

// builtinPolicies are defaultPolicy's and sandboxPolicy's specs when no
// configuration redefines them, in that order.
var builtinPolicies = [...]string{defaultPolicy + "=10/60s", sandboxPolicy + "=5/10s"}

// parsePolicies parses specs (limiter.ParsePolicies) and adds the built-in
// policies none of them redefines. The built-ins come first, in their order,
// each as specs redefine it if they do; then the rest as given.
func parsePolicies(specs []string) ([]limiter.Policy, error) {
	given, err := limiter.ParsePolicies(specs)
	if err != nil {
		return nil, err
	}
	out := make([]limiter.Policy, 0, len(builtinPolicies)+len(given))
	for _, b := range parseBuiltins() {
		if i := slices.IndexFunc(given, func(p limiter.Policy) bool { return p.Name == b.Name }); i >= 0 {
			b = given[i]
			given = slices.Delete(given, i, i+1)
		}
		out = append(out, b)
	}
	return append(out, given...), nil
}

// parseBuiltins parses builtinPolicies afresh, so no caller shares a
// policy's rules with another.
func parseBuiltins() []limiter.Policy {
	out := make([]limiter.Policy, len(builtinPolicies))
	for i, spec := range builtinPolicies {
		p, err := limiter.ParsePolicy(spec)
		if err != nil {
			panic("server: failed to parse a built-in policy: " + err.Error()) // constants: cannot happen
		}
		out[i] = p
	}
	return out
}

// builtinPoliciesText lists the built-in policies as --help writes them:
// "default=10/1m and demo=5/10s".
func builtinPoliciesText() string {
	specs := make([]string, len(builtinPolicies))
	for i, p := range parseBuiltins() {
		specs[i] = p.String()
	}
	return strings.Join(specs, " and ")
}
