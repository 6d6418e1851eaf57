package live

import (
	"encoding/json"
	"strconv"

	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/limiter"
)

// The stream's messages (SPEC §4). A text frame carries one message or, batched,
// a JSON array of them; each message's "type" is one of the Type constants of
// internal/bus, where every kind is declared once. Each message below is
// encoded once and the same bytes go to every viewer.

type helloMsg struct {
	Type     string `json:"type"`
	Instance string `json:"instance"`
	Key      string `json:"key"`
	Policy   string `json:"policy"`
	// Rules are those in force for the key: an override's when one applies.
	Rules  []policyRule `json:"rules"`
	TickMs int64        `json:"tickMs"`
	// Algorithm is how the policy keeps its windows (SPEC §8); Shadow marks
	// a policy whose denials are only reported (SPEC §9).
	Algorithm limiter.Algorithm `json:"algorithm"`
	Shadow    bool              `json:"shadow"`
	// Timezone is the zone the policy's calendar quotas count in.
	Timezone string `json:"timezone"`
	// Override is the per-client override in force; null when none applies.
	Override *overrideJSON `json:"override"`
}

// policyRule is a rule of a policy: its window, or a calendar quota's
// period ("day", "week", "month").
type policyRule struct {
	Limit    int            `json:"limit"`
	WindowMs int64          `json:"windowMs,omitempty"`
	Period   limiter.Period `json:"period,omitempty"`
}

func policyRules(rules []limiter.Rule) []policyRule {
	out := make([]policyRule, len(rules))
	for i, r := range rules {
		out[i] = policyRule{Limit: r.Limit, WindowMs: r.WindowMs(), Period: r.Period}
	}
	return out
}

// overrideJSON is an override as viewers read it: its label ("key" or
// "prefix:<prefix>"), rules, note and when it was last set.
type overrideJSON struct {
	Label     string       `json:"label"`
	Rules     []policyRule `json:"rules"`
	Note      string       `json:"note"`
	UpdatedMs int64        `json:"updatedMs"`
}

func newOverrideJSON(o *Override) *overrideJSON {
	if o == nil {
		return nil
	}
	return &overrideJSON{Label: o.Label, Rules: policyRules(o.Rules), Note: o.Note, UpdatedMs: o.UpdatedMs}
}

// timezone names p's zone, UTC unless it names one.
func timezone(p limiter.Policy) string {
	if p.Timezone == "" {
		return "UTC"
	}
	return p.Timezone
}

// helloMessage greets a viewer of key's window under p, the policy in
// force for it, which override o (nil: none) made.
func helloMessage(instance, key string, p limiter.Policy, o *Override, tickMs int64) []byte {
	return encode(helloMsg{
		Type: bus.TypeHello, Instance: instance, Key: key, Policy: p.Name, TickMs: tickMs,
		Rules: policyRules(p.Rules), Algorithm: p.AlgorithmName(), Shadow: p.Shadow,
		Timezone: timezone(p), Override: newOverrideJSON(o),
	})
}

// overrideMsg tells a window's viewers that the override in force for it
// changed: the rules in force now, and the override (null: the policy's own
// rules apply again).
type overrideMsg struct {
	Type     string        `json:"type"`
	Key      string        `json:"key"`
	Policy   string        `json:"policy"`
	Rules    []policyRule  `json:"rules"`
	Override *overrideJSON `json:"override"`
}

func overrideMessage(w Window, p limiter.Policy, o *Override) []byte {
	return encode(overrideMsg{Type: bus.TypeOverride, Key: w.Key, Policy: w.Policy, Rules: policyRules(p.Rules), Override: newOverrideJSON(o)})
}

type statusMsg struct {
	Type  string `json:"type"`
	Redis string `json:"redis"` // "up" or "down"
}

func statusMessage(up bool) []byte {
	state := "down"
	if up {
		state = "up"
	}
	return encode(statusMsg{Type: bus.TypeStatus, Redis: state})
}

type tickMsg struct {
	Type  string `json:"type"`
	NowMs int64  `json:"nowMs"`
}

// TickMessage is the clock tick at nowMs on the limiter's clock.
func TickMessage(nowMs int64) []byte { return encode(tickMsg{Type: bus.TypeTick, NowMs: nowMs}) }

// WindowState is a window read without consuming it: the body of GET
// /api/v1/window and, with a type, the snapshot message. Every algorithm
// fills the counts; the log adds its entries, the others each rule's state.
type WindowState struct {
	Key       string            `json:"key"`
	Policy    string            `json:"policy"`
	Algorithm limiter.Algorithm `json:"algorithm"`
	Entries   []Entry           `json:"entries"`
	Truncated bool              `json:"truncated"`
	Count     int               `json:"count"`
	Limit     int               `json:"limit"`
	WindowMs  int64             `json:"windowMs"`
	NowMs     int64             `json:"nowMs"`
	Rules     []RuleState       `json:"rules"`
	// Override names the per-client override whose rules the window is
	// counted under ("key" or "prefix:<prefix>"); absent under the
	// policy's own.
	Override string `json:"override,omitempty"`
	// Leases are an inflight policy's live leases, the earliest expiry
	// first (Count is how many are live, WindowMs the lease time).
	Leases []LeaseState `json:"leases,omitempty"`
}

// Entry is one entry of a window: its member and score.
type Entry struct {
	ID string `json:"id"`
	Ms int64  `json:"ms"`
}

// RuleState is one rule's state in a window: its counts and, for every
// algorithm but the log, the algorithm's own state as a member named for it
// (e.g. "gcra": {"tatMs", "emissionIntervalMs"}), in the wire form its
// limiter.State defines. A calendar quota has a period instead of a window,
// the length of the one holding now (PeriodMs) and the time to its end
// (ResetMs).
type RuleState struct {
	Limit     int
	WindowMs  int64
	Period    limiter.Period
	PeriodMs  int64
	ResetMs   int64
	Count     int
	Remaining int
	State     limiter.State
}

// MarshalJSON writes {"limit", "windowMs", "count", "remaining"} and the
// algorithm's member; for a quota {"limit", "period", "count", "remaining",
// "periodMs", "resetMs"}.
func (r RuleState) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 160)
	b = append(b, `{"limit":`...)
	b = strconv.AppendInt(b, int64(r.Limit), 10)
	if r.Period != "" {
		b = append(b, `,"period":"`...)
		b = append(b, r.Period...) // day, week or month
		b = append(b, '"')
	} else {
		b = append(b, `,"windowMs":`...)
		b = strconv.AppendInt(b, r.WindowMs, 10)
	}
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, int64(r.Count), 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, int64(r.Remaining), 10)
	if r.Period != "" {
		b = append(b, `,"periodMs":`...)
		b = strconv.AppendInt(b, r.PeriodMs, 10)
		b = append(b, `,"resetMs":`...)
		b = strconv.AppendInt(b, r.ResetMs, 10)
	}
	if r.State != nil {
		state, err := json.Marshal(r.State)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"`...)
		b = append(b, r.State.Algorithm()...) // a name of a-z, like every algorithm's
		b = append(b, `":`...)
		b = append(b, state...)
	}
	return append(b, '}'), nil
}

// NewWindowState turns the limiter's window into its JSON form.
func NewWindowState(w limiter.Window) WindowState {
	out := WindowState{
		Key: w.Key, Policy: w.Policy, Algorithm: w.Algorithm, Entries: make([]Entry, len(w.Entries)),
		Truncated: w.Truncated, Count: w.Count, Limit: w.Limit, WindowMs: w.WindowMs, NowMs: w.NowMs,
		Rules: make([]RuleState, len(w.Rules)), Leases: leaseStates(w.Leases),
	}
	for i, e := range w.Entries {
		out.Entries[i] = Entry{ID: e.ID, Ms: e.Ms}
	}
	for i, r := range w.Rules {
		out.Rules[i] = RuleState{
			Limit: r.Limit, WindowMs: r.WindowMs, Period: r.Period, PeriodMs: r.PeriodMs, ResetMs: r.ResetMs,
			Count: r.Count, Remaining: r.Remaining, State: r.State,
		}
	}
	return out
}

type snapshotMsg struct {
	Type string `json:"type"`
	WindowState
}

// snapshotMessage is w's snapshot, read under the rules of the override
// labelled override ("": the policy's own).
func snapshotMessage(w limiter.Window, override string) []byte {
	st := NewWindowState(w)
	st.Override = override
	return encode(snapshotMsg{Type: bus.TypeSnapshot, WindowState: st})
}

type resetMsg struct {
	Type   string `json:"type"`
	Key    string `json:"key"`
	Policy string `json:"policy"`
	NowMs  int64  `json:"nowMs"`
}

func resetMessage(w Window, nowMs int64) []byte {
	return encode(resetMsg{Type: bus.TypeReset, Key: w.Key, Policy: w.Policy, NowMs: nowMs})
}

// RaceOutcome is the outcome of a race (SPEC §6): the answer to POST /api/v1/race
// and, with a type, the race message.
type RaceOutcome struct {
	Mode       string `json:"mode"`
	Requests   int    `json:"requests"`
	Allowed    int    `json:"allowed"`
	Denied     int    `json:"denied"`
	Limit      int    `json:"limit"`
	Overshoot  int    `json:"overshoot"`
	DurationMs int64  `json:"durationMs"`
	Key        string `json:"key"`
	Policy     string `json:"policy"`
}

type raceMsg struct {
	Type string `json:"type"`
	RaceOutcome
}

func raceMessage(r RaceOutcome) []byte { return encode(raceMsg{Type: bus.TypeRace, RaceOutcome: r}) }

// The kinds of an adjustment message: a refund took a check's entries back,
// a settle made their number the check's true cost.
const (
	AdjustRefund = "refund"
	AdjustSettle = "settle"
)

// adjustmentMsg is a refund or a settle: was and now are the check's entries
// before and after; count and limit are the binding rule's after it (count
// may exceed limit after a settle to more: a debt).
type adjustmentMsg struct {
	Type     string `json:"type"`
	Kind     string `json:"kind"`
	Key      string `json:"key"`
	Policy   string `json:"policy"`
	ID       string `json:"id"`
	Was      int    `json:"was"`
	Now      int    `json:"now"`
	Count    int    `json:"count"`
	Limit    int    `json:"limit"`
	NowMs    int64  `json:"nowMs"`
	Instance string `json:"instance"`
}

func adjustmentMessage(kind string, a limiter.Adjustment, instance string) []byte {
	b := a.Bound()
	return encode(adjustmentMsg{
		Type: bus.TypeAdjustment, Kind: kind, Key: a.Key, Policy: a.Policy, ID: a.ID,
		Was: a.Was, Now: a.Now, Count: b.Count, Limit: b.Limit, NowMs: a.NowMs, Instance: instance,
	})
}

type viewersMsg struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
}

func viewersMessage(count int) []byte { return encode(viewersMsg{Type: bus.TypeViewers, Count: count}) }

// encode marshals a message; the types above cannot fail to encode.
func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("live: failed to encode a message: " + err.Error())
	}
	return b
}
