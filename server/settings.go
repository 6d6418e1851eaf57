package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/conffile"
	"github.com/ratescope/ratescope/server/envoyconf"
	"github.com/ratescope/ratescope/server/rls"
)

// settings is the configuration in force: what flags, environment and the
// config file say together, validated as a whole. It never changes once
// built; a reload builds a new one and swaps it in (configStore), so a
// decision that loaded it once sees one config, never half of two.
type settings struct {
	policies  []*policyEntry // defaults first, then flags and env, then the file
	byName    map[string]*policyEntry
	trusted   httplimit.TrustedProxies
	unmatched string // allow or deny
	routes    []route
	envoy     []envoyDomain
	// envoyFiles are envoyproxy/ratelimit's own config files (nil: none);
	// their limits are policies too.
	envoyFiles *envoyconf.Set
	version    string // a short hash of all of the above
	loadedAt   time.Time
}

// policyEntry is a policy with what answers need of it prepared once per
// config: its RateLimit-Policy field and item names, observed by its
// counters (policyCounters), and the counters of its refunds and settles.
type policyEntry struct {
	*httplimit.Policy
	adjusted adjustmentCounters
}

// policy finds a policy by name.
func (s *settings) policy(name string) (*policyEntry, bool) {
	p, ok := s.byName[name]
	return p, ok
}

// envoyDomain maps descriptors of one Envoy rate limit domain to policies,
// for the Envoy rate limit service (SPEC §7).
type envoyDomain struct {
	Domain      string
	Descriptors []envoyDescriptor
}

type envoyDescriptor struct {
	Keys   []string
	Policy string
}

// envoyPolicy finds the policy a descriptor with these entry keys maps to.
func (s *settings) envoyPolicy(domain string, keys []string) (*policyEntry, bool) {
	for _, d := range s.envoy {
		if d.Domain != domain {
			continue
		}
		for _, desc := range d.Descriptors {
			if slices.Equal(desc.Keys, keys) {
				return s.policy(desc.Policy)
			}
		}
	}
	return nil, false
}

// buildSettings validates cfg's policies and trusted proxies with file's
// (nil: no file) and envoyproxy/ratelimit's files (nil: none) into the
// settings to apply. Every problem is reported, each naming its field.
func buildSettings(cfg Config, file *parsedFile, envoyFiles *envoyconf.Set, m *metrics, now time.Time) (*settings, error) {
	if file == nil {
		file = &parsedFile{}
	}
	var errs []error
	s := &settings{byName: map[string]*policyEntry{}, unmatched: "allow", loadedAt: now, envoyFiles: envoyFiles}

	ps, err := mergePolicies(cfg.PolicySpecs, file)
	if err != nil {
		return nil, err
	}
	if envoyFiles != nil {
		// Their names hold a "." and never clash with ratescope's own.
		ps = append(ps, envoyFiles.Policies()...)
	}
	for _, p := range ps {
		e := &policyEntry{Policy: httplimit.Prepare(p, m.policyCounters(p.Name)), adjusted: m.adjustmentCounters(p.Name)}
		s.policies = append(s.policies, e)
		s.byName[p.Name] = e
		if p.InFlight() {
			m.leaseSeries(p.Name)
		}
	}

	proxies := slices.Clone(cfg.TrustedProxies)
	for i, e := range file.TrustedProxies {
		if _, err := httplimit.ParseTrustedProxies([]string{e}); err != nil {
			errs = append(errs, file.fieldErr(fmt.Sprintf("trustedProxies[%d]", i), "%v", err))
		}
		proxies = append(proxies, e)
	}
	s.trusted, _ = httplimit.ParseTrustedProxies(proxies)

	switch file.Unmatched {
	case "", "allow":
	case "deny":
		s.unmatched = "deny"
	default:
		errs = append(errs, file.fieldErr("unmatched", "%q: want allow or deny", file.Unmatched))
	}
	for i, fr := range file.Routes {
		r, err := buildRoute(fr, s, file, fmt.Sprintf("routes[%d]", i))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.routes = append(s.routes, r)
	}
	namespaceKeys(s.routes)
	envoy, err := buildEnvoy(file, s)
	if err != nil {
		errs = append(errs, err)
	}
	s.envoy = envoy
	if err := conffile.Join(errs); err != nil {
		return nil, err
	}
	s.version = s.hash()
	return s, nil
}

// mergePolicies puts the file's policies beside those of flags and env (a name
// in both is an error) and adds the defaults neither redefines. The file's
// YAML fields are composed into limiter.ParsePolicy's string form
// NAME=RULE[,RULE…][@ALGORITHM][+shadow], so one parser decides what a policy is.
func mergePolicies(flagSpecs []string, file *parsedFile) ([]limiter.Policy, error) {
	fromFlags := map[string]bool{}
	for _, spec := range flagSpecs {
		if p, err := limiter.ParsePolicy(spec); err == nil {
			fromFlags[p.Name] = true
		}
	}
	specs := slices.Clone(flagSpecs)
	inFile := map[string]bool{}
	var errs []error
	for i, fp := range file.Policies {
		path := fmt.Sprintf("policies[%d]", i)
		spec, err := policySpec(fp, file, path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p, err := limiter.ParsePolicy(spec)
		switch {
		case err != nil:
			errs = append(errs, file.fieldErr(path, "%v", err))
		case fromFlags[p.Name]:
			errs = append(errs, file.fieldErr(path+".name", "policy %q is also defined by --policy or RATESCOPE_POLICIES; define it in one place", p.Name))
		case inFile[p.Name]:
			errs = append(errs, file.fieldErr(path+".name", "policy %q is defined twice in the file", p.Name))
		default:
			inFile[p.Name] = true
			specs = append(specs, spec)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return parsePolicies(specs)
}

// policySpec composes one file policy's string form, refusing fields that
// would smuggle syntax into it.
func policySpec(fp filePolicy, file *parsedFile, path string) (string, error) {
	if fp.Name == "" {
		return "", file.fieldErr(path+".name", "is required")
	}
	if strings.ContainsAny(fp.Name, "=,@+ ") {
		return "", file.fieldErr(path+".name", "%q must be 1-32 characters of a-z 0-9 _ -", fp.Name)
	}
	if len(fp.Rules) == 0 {
		return "", file.fieldErr(path+".rules", "at least one rule such as \"5/1m\" is required")
	}
	for j, r := range fp.Rules {
		if r == "" || strings.ContainsAny(r, "=,@+") {
			return "", file.fieldErr(fmt.Sprintf("%s.rules[%d]", path, j), "%q: want LIMIT/WINDOW such as 5/1m", r)
		}
	}
	spec := fp.Name + "=" + strings.Join(fp.Rules, ",")
	if fp.Algorithm != "" {
		if strings.ContainsAny(fp.Algorithm, "=,@+/ ") {
			return "", file.fieldErr(path+".algorithm", "%q is not an algorithm", fp.Algorithm)
		}
		spec += "@" + fp.Algorithm
	}
	if fp.Shadow {
		spec += "+shadow"
	}
	if fp.Lock != "" {
		if strings.ContainsAny(fp.Lock, "=,@+ ") {
			return "", file.fieldErr(path+".lock", "%q: want a duration such as 15m", fp.Lock)
		}
		spec += "+lock=" + fp.Lock
	}
	if fp.Timezone != "" {
		// Checked here, so the field is named; a zone may hold '+' (Etc/GMT+5).
		loc, err := time.LoadLocation(fp.Timezone)
		if err != nil || strings.ContainsAny(fp.Timezone, "=,@ ") || fp.Timezone == "Local" || loc == nil {
			return "", file.fieldErr(path+".timezone", "%q: want an IANA time zone such as Europe/Berlin, America/New_York or UTC", fp.Timezone)
		}
		spec += "+tz=" + fp.Timezone
	}
	if fp.Lease != "" {
		if strings.ContainsAny(fp.Lease, "=,@+ ") {
			return "", file.fieldErr(path+".lease", "%q: want a duration such as 30s", fp.Lease)
		}
		spec += "+lease=" + fp.Lease
	}
	return spec, nil
}

func buildEnvoy(file *parsedFile, s *settings) ([]envoyDomain, error) {
	var out []envoyDomain
	var errs []error
	seen := map[string]bool{}
	mapped := map[string]bool{} // each entry's keys mapped so far, as entry index and quoted keys
	for i, fe := range file.Envoy {
		path := fmt.Sprintf("envoy[%d]", i)
		switch {
		case fe.Domain == "":
			errs = append(errs, file.fieldErr(path+".domain", "is required"))
		case seen[fe.Domain]:
			errs = append(errs, file.fieldErr(path+".domain", "domain %q appears twice", fe.Domain))
		case len(fe.Descriptors) == 0:
			errs = append(errs, file.fieldErr(path+".descriptors", "at least one descriptor is required"))
		case len(fe.Domain) > rls.MaxNameLen: // no call for it is taken
			errs = append(errs, file.fieldErr(path+".domain", "%d bytes: at most %d", len(fe.Domain), rls.MaxNameLen))
		}
		if s.envoyFiles != nil && s.envoyFiles.Has(fe.Domain) {
			errs = append(errs, file.fieldErr(path+".domain", "domain %q is also the domain of a file of --envoy-config-dir; define it in one place", fe.Domain))
		}
		seen[fe.Domain] = true
		d := envoyDomain{Domain: fe.Domain}
		for j, fd := range fe.Descriptors {
			dpath := fmt.Sprintf("%s.descriptors[%d]", path, j)
			switch {
			case len(fd.Keys) == 0 || slices.Contains(fd.Keys, ""):
				errs = append(errs, file.fieldErr(dpath+".keys", "list the descriptor's entry keys, e.g. [remote_address]"))
			case mapped[fmt.Sprintf("%d %q", i, fd.Keys)]:
				errs = append(errs, file.fieldErr(dpath+".keys", "%v is mapped twice in domain %q", fd.Keys, fe.Domain))
			case len(fd.Keys) > rls.MaxEntries: // no call with so many entries is taken
				errs = append(errs, file.fieldErr(dpath+".keys", "%d keys: at most %d", len(fd.Keys), rls.MaxEntries))
			case slices.ContainsFunc(fd.Keys, func(k string) bool { return len(k) > rls.MaxNameLen }):
				errs = append(errs, file.fieldErr(dpath+".keys", "a key of more than %d bytes", rls.MaxNameLen))
			}
			mapped[fmt.Sprintf("%d %q", i, fd.Keys)] = true
			if p, ok := s.policy(fd.Policy); !ok {
				errs = append(errs, file.fieldErr(dpath+".policy", "unknown policy %q", fd.Policy))
			} else if p.InFlight() {
				errs = append(errs, file.fieldErr(dpath+".policy", "policy %q limits requests in flight: the rate limit service answers before a request runs and never hears it end, so it cannot hold a lease; use a window policy", fd.Policy))
			}
			d.Descriptors = append(d.Descriptors, envoyDescriptor{Keys: fd.Keys, Policy: fd.Policy})
		}
		out = append(out, d)
	}
	return out, errors.Join(errs...)
}

// hash is the settings' version: equal configs have equal versions, whatever
// the file's comments or layout.
func (s *settings) hash() string {
	canonical := struct {
		Policies  []limiter.Policy
		Trusted   []string
		Unmatched string
		Routes    []string
		Envoy     []envoyDomain
		// The files' lookup rules beyond their policies (replaces,
		// unlimited, wildcards…) change the version too.
		EnvoyFiles string `json:",omitempty"`
	}{Trusted: s.trusted.Strings(), Unmatched: s.unmatched, Envoy: s.envoy}
	if s.envoyFiles != nil {
		canonical.EnvoyFiles = s.envoyFiles.Digest()
	}
	for _, p := range s.policies {
		canonical.Policies = append(canonical.Policies, p.Policy.Policy)
	}
	for _, r := range s.routes {
		canonical.Routes = append(canonical.Routes, r.String())
	}
	b, _ := json.Marshal(canonical)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}
