package tenants

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ratescope/ratescope/limiter"
)

// Bounds of one override.
const (
	// MaxPerPolicy bounds the overrides of one policy: enough for every
	// paying customer of a large API, few enough that a policy's overrides
	// cost each instance tens of MB at most.
	MaxPerPolicy = 100_000
	// MaxRules bounds the rules of one override, as every rule is counted
	// in each check's script run.
	MaxRules = 16
	// MaxNote bounds an override's note, in bytes.
	MaxNote = 1024
)

// RuleError is a rule of an override that the policy cannot take: Index is
// its place in the list, or -1 when the list as a whole is wrong (empty,
// too long, a window given twice).
type RuleError struct {
	Index int
	Err   error
}

func (e *RuleError) Error() string { return e.Err.Error() }

// Field names the bad input as a request's field: rules[2], or rules.
func (e *RuleError) Field() string {
	if e.Index < 0 {
		return "rules"
	}
	return fmt.Sprintf("rules[%d]", e.Index)
}

// ParseRules reads an override's rules for policy p — each LIMIT/WINDOW as
// in a policy spec, read by the limiter's own parser, so every rule a
// policy may have an override may have too — and holds them to the bounds
// of p's algorithm. The algorithm, shadow and lock stay p's: a rule may
// carry no option. The error is a *RuleError.
func ParseRules(p limiter.Policy, specs []string) ([]limiter.Rule, error) {
	switch {
	case len(specs) == 0:
		return nil, &RuleError{Index: -1, Err: errors.New("give at least one rule, e.g. [\"1000/1m\"]")}
	case len(specs) > MaxRules:
		return nil, &RuleError{Index: -1, Err: fmt.Errorf("at most %d rules", MaxRules)}
	}
	alg := string(p.AlgorithmName())
	for i, s := range specs {
		if strings.ContainsAny(s, ",@+=") || strings.TrimSpace(s) == "" {
			return nil, &RuleError{Index: i, Err: fmt.Errorf("rule %q: want one LIMIT/WINDOW, e.g. 1000/1m; the algorithm and options stay the policy's", truncate(s, 40))}
		}
		if _, err := parse(s, alg); err != nil {
			return nil, &RuleError{Index: i, Err: err}
		}
	}
	all, err := parse(strings.Join(specs, ","), alg)
	if err != nil {
		return nil, &RuleError{Index: -1, Err: err}
	}
	return all.Rules, nil
}

// parseName is the name ParseRules gives the policy it parses: its errors
// start with it, which they lose.
const parseName = "override"

func parse(rules, alg string) (limiter.Policy, error) {
	p, err := limiter.ParsePolicy(parseName + "=" + rules + "@" + alg)
	if err != nil {
		return p, errors.New(strings.TrimPrefix(err.Error(), fmt.Sprintf("policy %q: ", parseName)))
	}
	return p, nil
}

// ValidatePrefix checks a key prefix: what a key may be, 1 to
// limiter.MaxKeyLen bytes of limiter.KeyAlphabet.
func ValidatePrefix(prefix string) error {
	if limiter.ValidateKey(prefix) != nil {
		return fmt.Errorf("a prefix must be 1-%d bytes of %s", limiter.MaxKeyLen, limiter.KeyAlphabet)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
