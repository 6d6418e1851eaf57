package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/ratescope/ratescope/limiter"
)

// ProblemContentType is the media type of RFC 9457 problem documents.
const ProblemContentType = "application/problem+json"

// QuotaExceeded is the IANA problem type of a denied request.
const QuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Policy is a limiter.Policy with the parts of every answer that never change
// prepared once: the RateLimit-Policy field and each rule's item name, and
// the observers of this policy's checks.
type Policy struct {
	limiter.Policy
	header    string   // RateLimit-Policy; empty when a quota's period makes it change
	items     []string // each rule's item name, quoted
	observers []Observer
	override  string // Override
}

// Prepare readies p for answers. Prepare again when the policy changes.
// observers see the checks of this policy alone (e.g. counters per policy),
// after the Checker's own.
func Prepare(p limiter.Policy, observers ...Observer) *Policy {
	pp := &Policy{Policy: p, items: make([]string, len(p.Rules)), observers: observers}
	fields := make([]string, len(p.Rules))
	for i, r := range p.Rules {
		pp.items[i] = strconv.Quote(RuleName(p.Name, len(p.Rules), r.Period, r.WindowMs()))
		fields[i] = fmt.Sprintf("%s;q=%d;w=%d", pp.items[i], r.Limit, r.WindowMs()/1000)
	}
	if !p.HasQuotas() { // a quota's w is its period's length: Fields writes it
		pp.header = strings.Join(fields, ", ")
	}
	return pp
}

// WithRules is p with other rules — one client's override of them — and
// everything else of p's: its name (so the client keeps its window and
// log), algorithm, shadow, lock and observers. override names the override
// in answers (Decision.Override): "key" or "prefix:<prefix>". Its
// RateLimit-Policy field shows the new rules. Derive it once per override
// and policy, as Prepare is called once per policy: it is not free.
func (p *Policy) WithRules(rules []limiter.Rule, override string) *Policy {
	lp := p.Policy
	lp.Rules = rules
	pp := Prepare(lp, p.observers...)
	pp.override = override
	return pp
}

// Override names the override p was derived for (WithRules), or "" for a
// policy's own rules.
func (p *Policy) Override() string { return p.override }

// ItemName names a window rule in RateLimit headers and violated-policies:
// the policy alone when it has one rule, else policy/seconds.
func ItemName(policy string, rules int, windowMs int64) string {
	if rules == 1 {
		return policy
	}
	return policy + "/" + strconv.FormatInt(windowMs/1000, 10)
}

// RuleName names any rule as ItemName does a window, and a calendar quota
// policy/day, policy/week or policy/month, one rule or many: a quota's
// name says it is one.
func RuleName(policy string, rules int, period limiter.Period, windowMs int64) string {
	if period != "" {
		return policy + "/" + string(period)
	}
	return ItemName(policy, rules, windowMs)
}

// SetHeaders writes the IETF httpapi draft's RateLimit-Policy and RateLimit
// fields for d (Policy.Fields).
func SetHeaders(h http.Header, p *Policy, d limiter.Decision) {
	rateLimit, policy := p.Fields(d)
	// Canonical keys, set directly: this runs on every request.
	h["Ratelimit-Policy"] = []string{policy}
	h["Ratelimit"] = []string{rateLimit}
}

// Fields are the values of the RateLimit and RateLimit-Policy fields for d,
// a decision under p, one item per rule: r is the rule's remaining, t the
// seconds until its oldest entry slides out (rounded up; 0 when empty); q
// and w are its limit and window in seconds. For a calendar quota, w is the
// length of the period holding now (a month's, a DST day's 23 or 25 hours)
// and t the seconds to its end.
func (p *Policy) Fields(d limiter.Decision) (rateLimit, rateLimitPolicy string) {
	rateLimitPolicy = p.header
	if rateLimitPolicy == "" && len(d.Rules) == len(p.items) {
		rateLimitPolicy = p.policyField(d)
	}
	b := make([]byte, 0, 32*len(d.Rules))
	for i, r := range d.Rules {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, p.items[i]...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, int64(r.Remaining), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, (r.ResetMs+999)/1000, 10)
	}
	return string(b), rateLimitPolicy
}

// policyField is the RateLimit-Policy field of a policy with quotas, whose
// periods' lengths d reports.
func (p *Policy) policyField(d limiter.Decision) string {
	b := make([]byte, 0, 32*len(d.Rules))
	for i, r := range d.Rules {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, p.items[i]...)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, int64(r.Limit), 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, max(r.WindowMs, r.PeriodMs)/1000, 10)
	}
	return string(b)
}

// RetryAfter rounds a wait up to the whole seconds Retry-After carries.
func RetryAfter(ms int64) string {
	return strconv.FormatInt((ms+999)/1000, 10)
}

// RuleBody is one rule's state in an answer: a window rule's windowMs, or
// a calendar quota's period ("day", "week", "month").
type RuleBody struct {
	Limit     int            `json:"limit"`
	WindowMs  int64          `json:"windowMs,omitempty"`
	Period    limiter.Period `json:"period,omitempty"`
	Count     int            `json:"count"`
	Remaining int            `json:"remaining"`
}

// DecisionBody is a decision as the check API answers it (SPEC §3); its
// top-level numbers describe the binding rule. Allowed is whether the request
// may pass: a shadow policy's would-deny is allowed, with WouldDeny and the
// would-be RetryAfterMs (SPEC §9).
type DecisionBody struct {
	Allowed   bool   `json:"allowed"`
	Key       string `json:"key"`
	Policy    string `json:"policy"`
	Count     int    `json:"count"`
	Limit     int    `json:"limit"`
	Remaining int    `json:"remaining"`
	WindowMs  int64  `json:"windowMs"`
	// Period names the binding rule's period when it is a calendar quota,
	// whose windowMs is 0.
	Period       limiter.Period `json:"period,omitempty"`
	NowMs        int64          `json:"nowMs"`
	OldestMs     *int64         `json:"oldestMs"`
	RetryAfterMs int64          `json:"retryAfterMs"`
	ID           *string        `json:"id"`
	Rules        []RuleBody     `json:"rules"`
	// Cached marks a denial (or would-deny) answered by the local deny cache.
	Cached bool `json:"cached,omitempty"`
	// Shadow marks every decision of a shadow policy.
	Shadow bool `json:"shadow,omitempty"`
	// WouldDeny marks a shadow policy's decision that enforcing would refuse.
	WouldDeny bool `json:"wouldDeny,omitempty"`
	// Locked marks a denial of a locked-out key (a policy with a lock):
	// RetryAfterMs is the lock's remaining time; LockLevel counts the locks
	// in a row, each doubling the time.
	Locked    bool `json:"locked,omitempty"`
	LockLevel int  `json:"lockLevel,omitempty"`
	// Override names the per-client override that decided instead of the
	// policy's own rules: "key" or "prefix:<prefix>" (Checker.Resolve).
	Override string `json:"override,omitempty"`
	// BookedMs is the slot a check that may wait booked (on Redis's clock,
	// after NowMs): its entries are scored there, and the answer comes
	// then. Count, Remaining and the rules describe the windows at it.
	BookedMs int64 `json:"bookedMs,omitempty"`
	// WaitedMs is how long the server held a booked check before
	// answering: set by the one holding it, never by NewDecisionBody.
	WaitedMs int64 `json:"waitedMs,omitempty"`
	// Explain says why, when the caller asked (Target.Explain, the check
	// API's explain=1; Explain).
	Explain *Explanation `json:"explain,omitempty"`
}

// NewDecisionBody builds the answer to d.
func NewDecisionBody(d limiter.Decision) DecisionBody {
	b := d.Bound()
	out := DecisionBody{
		Allowed: !d.Denied(), Key: d.Key, Policy: d.Policy,
		Count: b.Count, Limit: b.Limit, Remaining: b.Remaining, WindowMs: b.WindowMs, Period: b.Period,
		NowMs: d.NowMs, RetryAfterMs: d.RetryAfterMs,
		Rules:  make([]RuleBody, len(d.Rules)),
		Cached: d.Cached, Shadow: d.Shadow, WouldDeny: d.WouldDeny(),
		Locked: d.Locked, LockLevel: d.LockLevel, Override: d.Override,
		BookedMs: d.BookedMs,
	}
	if b.OldestMs >= 0 {
		out.OldestMs = &b.OldestMs
	}
	if d.Allowed { // recorded: a would-deny is not
		out.ID = &d.ID
	}
	for i, r := range d.Rules {
		out.Rules[i] = RuleBody{Limit: r.Limit, WindowMs: r.WindowMs, Period: r.Period, Count: r.Count, Remaining: r.Remaining}
	}
	return out
}

// DeniedBody is the problem document of a denial: RFC 9457 members, the
// violated rules' item names, and the decision's members.
type DeniedBody struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
	DecisionBody
}

// FieldError names one bad input and why.
type FieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail,omitempty"`
	Errors []FieldError `json:"errors,omitempty"`
}

// NewProblem is a problem of no particular type with status's title.
func NewProblem(status int, detail string) Problem {
	return Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail}
}

// WriteProblem writes doc, any problem-shaped value, with status.
func WriteProblem(w http.ResponseWriter, status int, doc any) {
	b, err := json.Marshal(doc)
	if err != nil { // the documents here are plain structs; this cannot happen
		b = []byte(`{"type":"about:blank","status":500}`)
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", ProblemContentType)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeDenied answers a denial: status, Retry-After (the RateLimit fields
// are set already) and the problem document.
func writeDenied(w http.ResponseWriter, status int, d limiter.Decision, why *Explanation) {
	var violated []string
	for _, r := range d.Rules {
		if r.Violated {
			violated = append(violated, RuleName(d.Policy, len(d.Rules), r.Period, r.WindowMs))
		}
	}
	h := w.Header()
	h["Retry-After"] = []string{RetryAfter(d.RetryAfterMs)}
	h["Content-Type"] = []string{ProblemContentType}
	detail := "policy " + strconv.Quote(d.Policy) + " allows no more now; retry in " + strconv.FormatInt(d.RetryAfterMs, 10) + " ms"
	if d.Locked {
		detail = "policy " + strconv.Quote(d.Policy) + " has locked this key out; retry in " + strconv.FormatInt(d.RetryAfterMs, 10) + " ms"
	}
	body := DeniedBody{
		Type:             QuotaExceeded,
		Title:            "Request cannot be satisfied as assigned quota has been exceeded",
		Status:           status,
		Detail:           detail,
		ViolatedPolicies: violated,
		DecisionBody:     NewDecisionBody(d),
	}
	body.Explain = why
	w.WriteHeader(status)
	_, _ = w.Write(body.AppendJSON(make([]byte, 0, 768)))
}

// writeUnavailable is the fail-closed answer: try again in a second.
func writeUnavailable(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	WriteProblem(w, http.StatusServiceUnavailable,
		NewProblem(http.StatusServiceUnavailable, "the limiter could not reach Redis in time; try again shortly"))
}
