package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// explainJSON answers GET /api/v1/explain: the allowed check id's
// explanation, rebuilt from the log.
type explainJSON struct {
	Key     string                `json:"key"`
	Policy  string                `json:"policy"`
	ID      string                `json:"id"`
	Explain httplimit.Explanation `json:"explain"`
}

// handleExplain answers GET /api/v1/explain?key=&policy=&id=: why the
// allowed check id came out as it did, as the log still tells it — the
// entry's score is the check's now, and the entries around it are what
// each window held. Where the log can no longer say (entries evicted since,
// ties in one millisecond, quotas), the answer is "complete": false with
// its gaps. Reading it needs what reading the window needs; an id with no
// entry left is 404, a malformed one 400, another algorithm than the log
// 409: only the log keeps each check.
func handleExplain(w windowAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		p, err := readParams(c, fieldKey, fieldPolicy, fieldID)
		if err != nil {
			return err
		}
		key := p.key()
		pol := p.policy(w.store.load())
		id := p.id()
		if err := p.problem(); err != nil {
			return err
		}
		if err := w.auth.authorize(c, pol.Name, false); err != nil {
			return err
		}
		rules := w.inForce(key, pol.Policy)
		if rules.AlgorithmName() != limiter.Log {
			detail := "policy " + pol.Name + " uses algorithm " + string(rules.AlgorithmName()) + ", which keeps no entry per check; an explanation by id needs algorithm log (ask a check for one with explain=1)"
			pr := newProblem(http.StatusConflict, detail)
			pr.Errors = []httplimit.FieldError{{Field: "algorithm", Detail: detail}}
			return pr
		}
		var rc limiter.Recalled
		gone := false
		if err := w.redis.do(c, "explain", "failed to read the check's entries from Redis", func(ctx context.Context) (err error) {
			rc, err = w.lim.Recall(ctx, key, rules.Policy, id)
			if errors.Is(err, limiter.ErrNoEntry) {
				gone, err = true, nil
			}
			return err
		}); err != nil {
			return err
		}
		if gone {
			detail := "the log of key " + key + " under policy " + pol.Name + " holds no entry of that id: it slid out of the window and was evicted, was refunded, or never was"
			pr := newProblem(http.StatusNotFound, "id: "+detail)
			pr.Errors = []httplimit.FieldError{{Field: "id", Detail: detail}}
			return pr
		}
		e := httplimit.ExplainRecalled(rc, rules.Policy)
		e.Override = rules.Override()
		return c.JSON(http.StatusOK, explainJSON{Key: key, Policy: pol.Name, ID: id, Explain: e})
	}
}
