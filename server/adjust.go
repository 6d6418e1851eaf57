package server

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
)

// A check records before anyone knows how the request ends; a refund takes
// one check's entries back (the login succeeded, only failures count) and a
// settle makes their number the request's true cost (the tokens a call
// really used). Both act on the entries the check's id names, which held
// their room from the moment of the check: exact under any concurrency.

var fieldID = field{name: "id"}

// adjustAPI is what refunds and settles use: the policies in force, who may
// do what, the limiter, the bound on its Redis calls and the live view.
type adjustAPI struct {
	store *configStore
	auth  authorizer
	lim   *limiter.Limiter
	redis redisCalls
	live  *live.View
	log   *slog.Logger
	// resolve gives the rules in force for a key (Checker.PolicyFor): an
	// override's bound a settle's cost and describe the window after.
	resolve func(key string, p *httplimit.Policy) *httplimit.Policy
}

// refundJSON answers a refund: refunded is how many entries it took back
// (0 when none was left); count, limit and remaining are the binding rule's
// after it, as a check's are.
type refundJSON struct {
	Key       string `json:"key"`
	Policy    string `json:"policy"`
	ID        string `json:"id"`
	Refunded  int    `json:"refunded"`
	Count     int    `json:"count"`
	Limit     int    `json:"limit"`
	Remaining int    `json:"remaining"`
	NowMs     int64  `json:"nowMs"`
}

// settleJSON answers a settle like a refund, with the entries of the check
// found (was) and recorded now (settled); refunded is how many it took
// back, when it settled to fewer.
type settleJSON struct {
	Key       string `json:"key"`
	Policy    string `json:"policy"`
	ID        string `json:"id"`
	Refunded  int    `json:"refunded"`
	Was       int    `json:"was"`
	Settled   int    `json:"settled"`
	Count     int    `json:"count"`
	Limit     int    `json:"limit"`
	Remaining int    `json:"remaining"`
	NowMs     int64  `json:"nowMs"`
}

// target is one adjustment's validated input.
type target struct {
	key, id string
	pol     *policyEntry
	rules   *httplimit.Policy // pol's, or an override's for key
	cost    int               // a settle's
}

// params reads and checks key, policy, id and, for a settle, cost, as a
// check reads its own; then whether the caller may adjust (what a check
// needs); then whether the policy keeps entries per check at all (409
// naming algorithm). Nothing reaches Redis before all of it passed.
func (a adjustAPI) params(c echo.Context, settle bool) (target, error) {
	fields := []field{fieldKey, fieldPolicy, fieldID}
	if settle {
		fields = append(fields, fieldCost)
	}
	p, err := readParams(c, fields...)
	if err != nil {
		return target{}, err
	}
	t := target{key: p.key(), pol: p.policy(a.store.load())}
	t.rules = t.pol.Policy
	if !p.failed("key") && !p.failed("policy") {
		t.rules = a.resolve(t.key, t.pol.Policy)
	}
	t.id = p.id()
	if settle && !p.failed("policy") {
		if _, ok := p.values["cost"]; !ok && !p.failed("cost") {
			p.fail("cost", "is required: the check's true cost, from 0 to %d", t.rules.MaxCost())
		}
		t.cost = p.integer("cost", 0, 0, t.rules.MaxCost())
	}
	if err := p.problem(); err != nil {
		return target{}, err
	}
	if err := a.auth.authorize(c, t.pol.Name, false); err != nil {
		return target{}, err
	}
	if t.pol.AlgorithmName() != limiter.Log {
		return target{}, notLog(t.pol.Policy.Policy)
	}
	return t, nil
}

// id validates the required id of a check.
func (p *params) id() string {
	id, ok := p.values["id"]
	switch {
	case p.failed("id"):
	case !ok:
		p.fail("id", "is required: the id an allowed check answered with")
	case limiter.ValidateID(id) != nil:
		p.fail("id", "%q is not a check's id: send the id an allowed check answered with, a UUID such as 9b2f1c4e-3a5d-4e6f-8a7b-0c1d2e3f4a5b", truncate(id, 60))
	}
	return id
}

// notLog is the 409 of a policy whose algorithm keeps no entries per check.
func notLog(p limiter.Policy) *problem {
	detail := "policy " + p.Name + " uses algorithm " + string(p.AlgorithmName()) + ", which keeps no entries per check; refunds and settles need algorithm log"
	pr := newProblem(http.StatusConflict, detail)
	pr.Errors = []httplimit.FieldError{{Field: "algorithm", Detail: detail}}
	return pr
}

// adjust runs the limiter's refund or settle under the Redis bound, counts
// and streams it.
func (a adjustAPI) adjust(c echo.Context, kind string, t target, call func(ctx context.Context) (limiter.Adjustment, error)) (limiter.Adjustment, error) {
	// params validated everything the limiter would refuse, against the
	// same policy value: an error here is Redis's.
	var adj limiter.Adjustment
	if err := a.redis.do(c, kind, "failed to "+kind+" in Redis", func(ctx context.Context) (err error) {
		adj, err = call(ctx)
		return err
	}); err != nil {
		return adj, err
	}
	if kind == live.AdjustRefund {
		t.pol.adjusted.refunds.Inc()
	} else {
		t.pol.adjusted.settles.Inc()
	}
	a.live.Adjustment(kind, adj)
	a.log.Debug(kind, "key", t.key, "policy", t.pol.Name, "id", t.id, "was", adj.Was, "now", adj.Now)
	return adj, nil
}

// handleRefund takes back what one check recorded: POST /api/v1/refund.
func handleRefund(a adjustAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		t, err := a.params(c, false)
		if err != nil {
			return err
		}
		adj, err := a.adjust(c, live.AdjustRefund, t, func(ctx context.Context) (limiter.Adjustment, error) {
			return a.lim.Refund(ctx, t.key, t.rules.Policy, t.id)
		})
		if err != nil {
			return err
		}
		b := adj.Bound()
		return c.JSON(http.StatusOK, refundJSON{
			Key: adj.Key, Policy: adj.Policy, ID: adj.ID, Refunded: adj.Was - adj.Now,
			Count: b.Count, Limit: b.Limit, Remaining: b.Remaining, NowMs: adj.NowMs,
		})
	}
}

// handleSettle makes one check's recorded cost its true cost: POST
// /api/v1/settle.
func handleSettle(a adjustAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		t, err := a.params(c, true)
		if err != nil {
			return err
		}
		adj, err := a.adjust(c, live.AdjustSettle, t, func(ctx context.Context) (limiter.Adjustment, error) {
			return a.lim.Settle(ctx, t.key, t.rules.Policy, t.id, t.cost)
		})
		if err != nil {
			return err
		}
		b := adj.Bound()
		return c.JSON(http.StatusOK, settleJSON{
			Key: adj.Key, Policy: adj.Policy, ID: adj.ID, Refunded: max(0, adj.Was-adj.Now), Was: adj.Was, Settled: adj.Now,
			Count: b.Count, Limit: b.Limit, Remaining: b.Remaining, NowMs: adj.NowMs,
		})
	}
}
