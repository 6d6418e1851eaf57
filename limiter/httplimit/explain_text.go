package httplimit

import (
	"fmt"
	"strings"

	"github.com/ratescope/ratescope/limiter"
)

// The words of an explanation (Explain): sentences built from its numbers,
// epoch ms on Redis's clock, so a reader can redo every sum.

// arithmetic is a retry's sum: retryAfterMs = kth + window − now.
func arithmetic(kth, windowMs, now, retry int64) string {
	return fmt.Sprintf("retryAfterMs = kth + window − now = %d + %d − %d = %d", kth, windowMs, now, retry)
}

func summary(e Explanation) string {
	var b strings.Builder
	switch e.Outcome {
	case OutcomeAllowed:
		fmt.Fprintf(&b, "Allowed at %d: every rule had room for cost %d", e.NowMs, e.Cost)
		if e.Shadow {
			b.WriteString(" (shadow policy)")
		}
		b.WriteString(", so its entries were recorded at that score.")
	case OutcomeBooked:
		fmt.Fprintf(&b, "Booked: at %d the window had no room, but the first moment cost %d fits, %d, was within the check's wait; its entries were recorded there, %d ms ahead.",
			e.NowMs, e.Cost, e.Booking.BookedMs, e.Booking.WaitMs)
	case OutcomeLocked:
		fmt.Fprintf(&b, "Locked: the key is locked out until %d (level %d), so every check is denied until then, whatever room the window has: retry in %d ms.",
			e.Lock.UntilMs, e.Lock.Level, e.RetryAfterMs)
	case OutcomeDenied:
		fmt.Fprintf(&b, "Denied at %d: ", e.NowMs)
		var full []string
		for _, r := range e.Rules {
			if !r.Fits {
				full = append(full, r.Name)
			}
		}
		fmt.Fprintf(&b, "%s had no room for cost %d; retry in %d ms", strings.Join(full, " and "), e.Cost, e.RetryAfterMs)
		if e.Shadow {
			b.WriteString(" (shadow policy: let through all the same)")
		}
		b.WriteString("; nothing was recorded.")
	}
	if e.Cached {
		b.WriteString(" The local deny cache answered, repeating Redis's earlier denial counted down: no script ran.")
	}
	if e.Override != "" {
		fmt.Fprintf(&b, " The override %q set the rules.", e.Override)
	}
	return b.String()
}

func ruleText(e Explanation, r RuleWhy) string {
	if r.Period != "" {
		s := fmt.Sprintf("%s: the %s from %d to %d had counted %d of %d", r.Name, r.Period, r.FromMs, r.ToMs, r.Count, r.Limit)
		if r.Fits {
			return s + fmt.Sprintf("; %d + %d ≤ %d: room.", r.Count, e.Cost, r.Limit)
		}
		return s + fmt.Sprintf("; %d + %d > %d: no room until the next %s starts at %d, in %d ms.", r.Count, e.Cost, r.Limit, r.Period, r.ToMs, r.RetryMs)
	}
	s := fmt.Sprintf("%s: the window (%d, %d] held %d of %d", r.Name, r.FromMs, r.ToMs, r.Count, r.Limit)
	if r.OldestMs != nil {
		s += fmt.Sprintf(", the oldest at %d", *r.OldestMs)
	}
	if r.Fits {
		return s + fmt.Sprintf("; %d + %d ≤ %d: room.", r.Count, e.Cost, r.Limit)
	}
	s += fmt.Sprintf("; %d + %d > %d: no room", r.Count, e.Cost, r.Limit)
	if r.KthMs == nil {
		return s + "."
	}
	return s + fmt.Sprintf(". Entry %d from the oldest, at %d, must slide out first, at %d: %s.",
		r.K, *r.KthMs, *r.KthMs+r.WindowMs, r.Arithmetic)
}

func lockText(e Explanation) string {
	return fmt.Sprintf("Locked out until %d, level %d (each lock within 24 h of the last doubles the time, up to 24 h): %d − %d = %d ms left.",
		e.Lock.UntilMs, e.Lock.Level, e.Lock.UntilMs, e.NowMs, e.Lock.UntilMs-e.NowMs)
}

func bookingText(e Explanation) string {
	return fmt.Sprintf("Booked %d = now %d + %d ms: the first moment every rule has room for cost %d; the rules above are counted at that moment.",
		e.Booking.BookedMs, e.NowMs, e.Booking.WaitMs, e.Cost)
}

// stepsWhy puts the decision's numbers beside each step of its script,
// by the step's name (check.lua's "-- step NAME [...]" lines).
func stepsWhy(steps []limiter.Step, e Explanation, p limiter.Policy, d limiter.Decision) []StepWhy {
	var longest int64
	quotas := 0
	for _, r := range e.Rules {
		longest = max(longest, r.WindowMs)
		if r.Period != "" {
			quotas++
		}
	}
	recorded := d.Allowed && !d.Peek
	out := make([]StepWhy, 0, len(steps))
	for _, s := range steps {
		w := StepWhy{Name: s.Name, Commands: s.Commands, Text: s.Text}
		switch s.Name {
		case "now":
			w.Detail = fmt.Sprintf("now = %d", e.NowMs)
		case "evict":
			w.Detail = fmt.Sprintf("entries scored ≤ %d − %d = %d leave, if any are left", e.NowMs, longest, e.NowMs-longest)
		case "rules":
			w.Detail = windowDetail(e)
		case "quotas":
			w.Skipped = quotas == 0
			if !w.Skipped {
				w.Detail = quotaDetail(e)
			}
		case "wait":
			w.Skipped = e.Booking == nil
			if e.Booking != nil {
				w.Detail = fmt.Sprintf("booked %d + %d = %d", e.NowMs, e.Booking.WaitMs, e.Booking.BookedMs)
			}
		case "lock":
			w.Skipped = p.Lock <= 0 && e.Lock == nil
			switch {
			case e.Lock != nil:
				w.Detail = fmt.Sprintf("locked until %d, level %d", e.Lock.UntilMs, e.Lock.Level)
			case !w.Skipped:
				w.Detail = "no lock in force"
			}
		case "booking":
			w.Skipped = e.Booking == nil
			if e.Booking != nil {
				w.Detail = fmt.Sprintf("each rule counted at %d", e.Booking.BookedMs)
			}
		case "record":
			w.Skipped = !recorded
			if recorded {
				w.Detail = fmt.Sprintf("%d entries added at score %d", e.Cost, e.AtMs)
			}
		case "answer":
			w.Skipped = d.Allowed
			if !d.Allowed {
				w.Detail = fmt.Sprintf("retryAfterMs = %d", e.RetryAfterMs)
			}
		}
		if e.Cached { // the cache answered: no script ran for this check
			w.Skipped, w.Detail = true, ""
		}
		out = append(out, w)
	}
	return out
}

func windowDetail(e Explanation) string {
	var parts []string
	for _, r := range e.Rules {
		if r.Period != "" {
			continue
		}
		s := fmt.Sprintf("%s: (%d, %d] holds %d; %d + %d %s %d", r.Name, r.FromMs, r.ToMs, r.Count, r.Count, e.Cost, cmp(r.Fits), r.Limit)
		if r.KthMs != nil {
			s += fmt.Sprintf("; k = %d, kth = %d; %s", r.K, *r.KthMs, r.Arithmetic)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " · ")
}

func quotaDetail(e Explanation) string {
	var parts []string
	for _, r := range e.Rules {
		if r.Period != "" {
			parts = append(parts, fmt.Sprintf("%s: [%d, %d) counted %d; %d + %d %s %d", r.Name, r.FromMs, r.ToMs, r.Count, r.Count, e.Cost, cmp(r.Fits), r.Limit))
		}
	}
	return strings.Join(parts, " · ")
}

func cmp(fits bool) string {
	if fits {
		return "≤"
	}
	return ">"
}
