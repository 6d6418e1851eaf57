package live

import "github.com/ratescope/ratescope/limiter"

// Override is the per-client override in force for a watched window: its
// rules replace the policy's for that key (Deps.Resolve), so viewers see
// the window counted as the checks decide it. Its slices are shared: read,
// never change them.
type Override struct {
	// Label names it as decisions do: "key" for the client's own,
	// "prefix:<prefix>" for a prefix's.
	Label     string
	Rules     []limiter.Rule
	Note      string
	UpdatedMs int64 // when it was last set, on Redis's clock
}

// label is o's Label, "" for none.
func (o *Override) label() string {
	if o == nil {
		return ""
	}
	return o.Label
}

// inForce is the policy in force for key under p, and the override it
// comes from (nil: p's own rules).
func (v *View) inForce(key string, p limiter.Policy) (limiter.Policy, *Override) {
	if v.d.Resolve == nil {
		return p, nil
	}
	return v.d.Resolve(key, p)
}

// OverrideChanged tells the viewers of the windows an override change
// touches — key's under policy, or every watched window of policy when key
// is "" (a prefix's override, or all of the policy's re-read) — the rules
// now in force, in an override message, and reads their windows again
// under them: the change reaches open tabs within a snapshot round, on
// every instance whose overrides follow it. It costs nothing for windows
// nobody watches here.
func (v *View) OverrideChanged(policy, key string) {
	if key != "" {
		v.overrideChanged(Window{Key: key, Policy: policy})
		return
	}
	for _, a := range v.hub.Audiences(nil) {
		if a.Topic.Policy == policy {
			v.overrideChanged(a.Topic)
		}
	}
}

// overrideChanged sends w's viewers the rules in force for it now. The
// message is a state: a newer one replaces one not yet sent.
func (v *View) overrideChanged(w Window) {
	if v.hub.Count(w) == 0 {
		return
	}
	p, ok := v.d.Policy(w.Policy)
	if !ok {
		return
	}
	p, o := v.inForce(w.Key, p)
	v.hub.PublishLatest(w, kindOverride, overrideMessage(w, p, o))
	v.snapshots.markDirty(w)
}
