package httplimit

import (
	"github.com/ratescope/ratescope/limiter"
)

// An explanation says why one decision came out as it did, from that
// decision's own numbers: Redis's now, each rule's window and count, for a
// denial the entry that must slide out and the arithmetic of the retry, the
// lock, quota, override or booking in force, and the script's steps with
// the numbers they worked on. It is built here and nowhere else: the check
// API answers it when asked (explain=1), GET /api/v1/explain rebuilds one
// for an allowed check from the log, and the live stream carries its
// numbers (Lean) so the page can show any decision's.

// The outcomes an explanation names.
const (
	OutcomeAllowed  = "allowed"
	OutcomeDenied   = "denied"
	OutcomeLocked   = "locked"
	OutcomeBooked   = "booked"
	OutcomeFailOpen = "failOpen"
)

// Explanation is why one decision came out as it did. Times are epoch ms on
// Redis's clock. Complete is false when some number could no longer be
// known (a rebuilt explanation whose log lost entries since); Gaps say which.
type Explanation struct {
	// Outcome is allowed, denied, locked (a lockout decided), booked (a
	// check that may wait got a later slot) or failOpen (Redis did not
	// decide in time and the request passed unchecked).
	Outcome string `json:"outcome"`
	// Text is the explanation in one or two sentences, for people.
	Text      string `json:"text,omitempty"`
	Algorithm string `json:"algorithm,omitempty"`
	Cost      int    `json:"cost,omitempty"`
	// NowMs is Redis's clock when the script ran; AtMs the moment the
	// rules were counted at: NowMs, or a booking's slot.
	NowMs        int64  `json:"nowMs,omitempty"`
	AtMs         int64  `json:"atMs,omitempty"`
	RetryAfterMs int64  `json:"retryAfterMs"`
	Override     string `json:"override,omitempty"`
	Shadow       bool   `json:"shadow,omitempty"`
	// Cached: the local deny cache repeated an earlier denial of Redis's;
	// no script ran for this one.
	Cached   bool           `json:"cached,omitempty"`
	Rules    []RuleWhy      `json:"rules,omitempty"`
	Lock     *LockWhy       `json:"lock,omitempty"`
	Booking  *BookingWhy    `json:"booking,omitempty"`
	Steps    []StepWhy      `json:"steps,omitempty"`
	Complete bool           `json:"complete"`
	Gaps     []string       `json:"gaps,omitempty"`
	Recalled *RecalledEntry `json:"recalled,omitempty"`
}

// RuleWhy is one rule as the decision counted it.
type RuleWhy struct {
	// Name is the rule's item name in RateLimit headers (RuleName).
	Name     string         `json:"name"`
	Limit    int            `json:"limit"`
	WindowMs int64          `json:"windowMs,omitempty"`
	Period   limiter.Period `json:"period,omitempty"`
	// FromMs and ToMs bound what the rule counted: a window's
	// (AtMs − windowMs, AtMs], a calendar quota's period [start, end).
	FromMs int64 `json:"fromMs"`
	ToMs   int64 `json:"toMs"`
	// Count is what the rule held before this request; Fits reports
	// Count + Cost ≤ Limit.
	Count int  `json:"count"`
	Fits  bool `json:"fits"`
	// OldestMs is the oldest entry inside the window before this request
	// (absent when it was empty, and for a quota).
	OldestMs *int64 `json:"oldestMs,omitempty"`
	// For a window that had no room: k = Count + Cost − Limit, the k-th
	// oldest entry inside it (KthMs = AtMs + RetryMs − WindowMs) must slide
	// out first, and RetryMs = KthMs + WindowMs − AtMs.
	K       int    `json:"k,omitempty"`
	KthMs   *int64 `json:"kthMs,omitempty"`
	RetryMs int64  `json:"retryMs"`
	// Binding marks the rule the answer's top-level numbers describe.
	Binding bool `json:"binding,omitempty"`
	// Arithmetic is the retry's sum with this decision's numbers.
	Arithmetic string `json:"arithmetic,omitempty"`
	Text       string `json:"text,omitempty"`
}

// LockWhy is the lockout that decided: it ends at UntilMs; Level counts the
// locks of the key in a row, each doubling the time.
type LockWhy struct {
	UntilMs int64  `json:"untilMs"`
	Level   int    `json:"level"`
	Text    string `json:"text,omitempty"`
}

// BookingWhy is the slot a check that may wait booked: its entries are
// scored at BookedMs, WaitMs after NowMs.
type BookingWhy struct {
	BookedMs int64  `json:"bookedMs"`
	WaitMs   int64  `json:"waitMs"`
	Text     string `json:"text,omitempty"`
}

// StepWhy is one step of the script (limiter.Step) with this decision's
// numbers in Detail; Skipped reports a step that did nothing for it.
type StepWhy struct {
	Name     string   `json:"name"`
	Commands []string `json:"commands"`
	Text     string   `json:"text"`
	Detail   string   `json:"detail,omitempty"`
	Skipped  bool     `json:"skipped,omitempty"`
}

// RecalledEntry says where a rebuilt explanation (Recall) came from: the
// entry's id and, when read, Redis's clock then.
type RecalledEntry struct {
	ID    string `json:"id"`
	NowMs int64  `json:"nowMs"`
}

// Explain explains d, a decision under p (the policy that decided, for its
// lock), with the steps of d's algorithm's script.
func Explain(d limiter.Decision, p limiter.Policy) Explanation {
	e := explainNumbers(d)
	e.Text = summary(e)
	for i := range e.Rules {
		e.Rules[i].Text = ruleText(e, e.Rules[i])
	}
	if e.Lock != nil {
		e.Lock.Text = lockText(e)
	}
	if e.Booking != nil {
		e.Booking.Text = bookingText(e)
	}
	e.Steps = stepsWhy(stepsOf(d.Algorithm), e, p, d)
	return e
}

// Lean explains d with its numbers alone — no sentences, no steps: what
// the live stream carries on each decision, so a page can explain any of
// them without asking.
// Lean leaves out what a reader derives: the arithmetic (the sum of its
// numbers) and AtMs unless a booking moved it from NowMs.
func Lean(d limiter.Decision) *Explanation {
	e := explainNumbers(d)
	if e.AtMs == e.NowMs {
		e.AtMs = 0
	}
	for i := range e.Rules {
		e.Rules[i].Arithmetic = ""
	}
	return &e
}

// ExplainFailOpen explains an answer the fail mode gave: no decision.
func ExplainFailOpen() Explanation {
	return Explanation{
		Outcome:  OutcomeFailOpen,
		Text:     "Redis did not decide within the check timeout and the fail mode is open: the request passed unchecked, nothing was recorded and nothing was counted.",
		Complete: true,
	}
}

// explainNumbers is the explanation's numbers, without its words.
func explainNumbers(d limiter.Decision) Explanation {
	e := Explanation{
		Algorithm: string(d.Algorithm), Cost: d.Cost, NowMs: d.NowMs, AtMs: d.NowMs,
		RetryAfterMs: d.RetryAfterMs, Override: d.Override, Shadow: d.Shadow, Cached: d.Cached,
		Complete: true,
	}
	switch {
	case d.Locked:
		e.Outcome = OutcomeLocked
		e.Lock = &LockWhy{UntilMs: d.LockUntilMs, Level: d.LockLevel}
	case d.Booked():
		e.Outcome = OutcomeBooked
		e.AtMs = d.BookedMs
		e.Booking = &BookingWhy{BookedMs: d.BookedMs, WaitMs: d.WaitMs()}
	case d.Allowed:
		e.Outcome = OutcomeAllowed
	default:
		e.Outcome = OutcomeDenied
	}
	recorded := d.Allowed && !d.Peek
	for i, r := range d.Rules {
		w := RuleWhy{
			Name: RuleName(d.Policy, len(d.Rules), r.Period, r.WindowMs), Limit: r.Limit,
			WindowMs: r.WindowMs, Period: r.Period, Count: r.Count, Binding: i == d.Binding && len(d.Rules) > 1,
		}
		if recorded {
			w.Count -= d.Cost // the rules count this request when it was recorded
		}
		w.Fits = w.Count+d.Cost <= r.Limit
		if r.Period != "" {
			w.ToMs = e.AtMs + r.ResetMs
			w.FromMs = w.ToMs - r.PeriodMs
		} else {
			w.FromMs, w.ToMs = e.AtMs-r.WindowMs, e.AtMs
			if r.OldestMs >= 0 && w.Count > 0 {
				oldest := r.OldestMs
				w.OldestMs = &oldest
			}
		}
		if !d.Allowed && r.Violated {
			w.RetryMs = r.RetryMs
		}
		// The k-th oldest entry: the log's own retry, which a lock's
		// (when longer) replaced.
		ownRetry := !d.Locked || r.RetryMs > d.LockUntilMs-d.NowMs
		if d.Algorithm == limiter.Log && r.Period == "" && !w.Fits && !d.Allowed && ownRetry {
			w.K = w.Count + d.Cost - r.Limit
			kth := e.AtMs + r.RetryMs - r.WindowMs
			w.KthMs = &kth
			w.Arithmetic = arithmetic(kth, r.WindowMs, e.AtMs, r.RetryMs)
		}
		e.Rules = append(e.Rules, w)
	}
	return e
}

// ExplainRecalled explains an allowed check as the log still tells it
// (limiter.Limiter.Recall) under p, its policy: Complete is false, and
// Gaps say why, where the log can no longer say what the check saw.
func ExplainRecalled(rc limiter.Recalled, p limiter.Policy) Explanation {
	e := Explain(rc.Decision, p)
	// Recall leaves the quotas out: name the windows as the policy does.
	j := 0
	for _, r := range p.Rules {
		if r.Period == "" && j < len(e.Rules) {
			e.Rules[j].Name = RuleName(p.Name, len(p.Rules), "", r.WindowMs())
			e.Rules[j].Text = ruleText(e, e.Rules[j])
			j++
		}
	}
	e.Steps = stepsWhy(stepsOf(rc.Decision.Algorithm), e, p, rc.Decision)
	e.Recalled = &RecalledEntry{ID: rc.Decision.ID, NowMs: rc.NowMs}
	e.Gaps = rc.Gaps
	e.Complete = len(rc.Gaps) == 0
	e.Text = "Rebuilt from the log: " + e.Text
	return e
}

func stepsOf(a limiter.Algorithm) []limiter.Step {
	desc, _ := limiter.Describe(a)
	return desc.Steps
}
