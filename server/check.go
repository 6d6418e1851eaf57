package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratescope/ratescope/limiter"
)

// ruleJSON is one rule's state in a check answer.
type ruleJSON struct {
	Limit     int   `json:"limit"`
	WindowMs  int64 `json:"windowMs"`
	Count     int   `json:"count"`
	Remaining int   `json:"remaining"`
}

// checkJSON is the answer to a check; its top-level numbers describe the
// binding rule.
type checkJSON struct {
	Allowed      bool       `json:"allowed"`
	Key          string     `json:"key"`
	Policy       string     `json:"policy"`
	Count        int        `json:"count"`
	Limit        int        `json:"limit"`
	Remaining    int        `json:"remaining"`
	WindowMs     int64      `json:"windowMs"`
	NowMs        int64      `json:"nowMs"`
	OldestMs     *int64     `json:"oldestMs"`
	RetryAfterMs int64      `json:"retryAfterMs"`
	ID           *string    `json:"id"`
	Rules        []ruleJSON `json:"rules"`
}

// deniedJSON is the 429 problem document: the check answer plus RFC 9457
// members.
type deniedJSON struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
	checkJSON
}

// failOpenJSON is the answer when Redis failed and the fail mode is open.
type failOpenJSON struct {
	Allowed  bool   `json:"allowed"`
	FailOpen bool   `json:"failOpen"`
	Key      string `json:"key"`
	Policy   string `json:"policy"`
}

func toCheckJSON(d limiter.Decision) checkJSON {
	b := d.Bound()
	out := checkJSON{
		Allowed: d.Allowed, Key: d.Key, Policy: d.Policy,
		Count: b.Count, Limit: b.Limit, Remaining: b.Remaining, WindowMs: b.WindowMs,
		NowMs: d.NowMs, OldestMs: oldest(b.OldestMs), RetryAfterMs: d.RetryAfterMs,
		Rules: make([]ruleJSON, len(d.Rules)),
	}
	if d.Allowed {
		out.ID = &d.ID
	}
	for i, r := range d.Rules {
		out.Rules[i] = ruleJSON{Limit: r.Limit, WindowMs: r.WindowMs, Count: r.Count, Remaining: r.Remaining}
	}
	return out
}

// oldest maps the limiter's -1 for "empty" to JSON null.
func oldest(ms int64) *int64 {
	if ms < 0 {
		return nil
	}
	return &ms
}

// itemName names a rule in RateLimit headers: the policy alone when it has one
// rule, else policy/seconds.
func itemName(p string, rules int, windowMs int64) string {
	if rules == 1 {
		return p
	}
	return p + "/" + strconv.FormatInt(windowMs/1000, 10)
}

// checkPolicy is what a check needs of a policy beyond its rules, prepared
// once at start-up: the RateLimit-Policy field (it never changes), each rule's
// quoted item name, and the policy's decision counters.
type checkPolicy struct {
	rateLimitPolicy string
	items           []string // strconv.Quote(itemName(…)), one per rule
	allowed, denied prometheus.Counter
}

func newCheckPolicies(ps []limiter.Policy, m *metrics) map[string]*checkPolicy {
	out := make(map[string]*checkPolicy, len(ps))
	for _, p := range ps {
		cp := &checkPolicy{
			items:   make([]string, len(p.Rules)),
			allowed: m.decisions.WithLabelValues(p.Name, "allowed"),
			denied:  m.decisions.WithLabelValues(p.Name, "denied"),
		}
		pol := make([]string, len(p.Rules))
		for i, r := range p.Rules {
			cp.items[i] = strconv.Quote(itemName(p.Name, len(p.Rules), r.WindowMs()))
			pol[i] = fmt.Sprintf("%s;q=%d;w=%d", cp.items[i], r.Limit, r.WindowMs()/1000)
		}
		cp.rateLimitPolicy = strings.Join(pol, ", ")
		out[p.Name] = cp
	}
	return out
}

// setRateLimitHeaders writes the IETF httpapi draft's RateLimit-Policy and
// RateLimit fields, one item per rule.
func setRateLimitHeaders(h http.Header, cp *checkPolicy, d limiter.Decision) {
	b := make([]byte, 0, 32*len(d.Rules))
	for i, r := range d.Rules {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, cp.items[i]...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, int64(r.Remaining), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, (r.ResetMs+999)/1000, 10)
	}
	// Canonical keys, set directly: these run on every check.
	h["Ratelimit-Policy"] = []string{cp.rateLimitPolicy}
	h["Ratelimit"] = []string{string(b)}
}

// handleCheck decides and records one request: POST /api/v1/check.
func handleCheck(a *app) echo.HandlerFunc {
	return func(c echo.Context) error {
		p, err := readParams(c, fieldKey, fieldPolicy, fieldCost)
		if err != nil {
			return err
		}
		key := p.key()
		pol := p.policy(a.cfg)
		cost := 1
		if !p.failed("policy") {
			cost = p.integer("cost", 1, 1, pol.SmallestLimit())
		}
		if err := p.problem(); err != nil {
			return err
		}
		if err := a.authorize(c, pol.Name, false); err != nil {
			return err
		}

		ctx, cancel := context.WithTimeout(c.Request().Context(), a.cfg.CheckTimeout)
		defer cancel()
		start := time.Now()
		a.metrics.checksActive.Inc()
		d, err := a.lim.Allow(ctx, key, pol, cost)
		a.metrics.checksActive.Dec()
		a.metrics.checkDuration.Observe(time.Since(start).Seconds())
		if err != nil {
			a.metrics.redisErrors.WithLabelValues("check").Inc()
			a.log.Warn("check failed", "policy", pol.Name, "fail_mode", a.cfg.FailMode, "err", err)
			if a.cfg.FailMode == FailOpen {
				a.metrics.failOpen.WithLabelValues(pol.Name).Inc()
				return c.JSON(http.StatusOK, failOpenJSON{Allowed: true, FailOpen: true, Key: key, Policy: pol.Name})
			}
			return unavailable("the limiter could not reach Redis in time; try again shortly")
		}
		cp := a.checkPolicies[pol.Name]
		if d.Allowed {
			cp.allowed.Inc()
		} else {
			cp.denied.Inc()
		}
		a.live.Decision(d)
		setRateLimitHeaders(c.Response().Header(), cp, d)
		body := toCheckJSON(d)
		if d.Allowed {
			return c.JSON(http.StatusOK, body)
		}
		var violated []string
		for _, r := range d.Rules {
			if r.Violated {
				violated = append(violated, itemName(d.Policy, len(d.Rules), r.WindowMs))
			}
		}
		h := http.Header{}
		h.Set("Retry-After", retryAfterSeconds(d.RetryAfterMs))
		return writeProblem(c, http.StatusTooManyRequests, deniedJSON{
			Type:             quotaExceeded,
			Title:            "Request cannot be satisfied as assigned quota has been exceeded",
			Status:           http.StatusTooManyRequests,
			Detail:           fmt.Sprintf("policy %q allows no more now; retry in %d ms", d.Policy, d.RetryAfterMs),
			ViolatedPolicies: violated,
			checkJSON:        body,
		}, h)
	}
}
