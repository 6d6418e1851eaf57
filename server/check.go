package server

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter/httplimit"
)

// failOpenJSON is the check's answer when Redis failed and the fail mode is open.
type failOpenJSON struct {
	Allowed  bool   `json:"allowed"`
	FailOpen bool   `json:"failOpen"`
	Key      string `json:"key"`
	Policy   string `json:"policy"`
}

// handleCheck decides and records one request: POST /api/v1/check. It reads
// its own parameters and writes its own JSON body; everything else is the
// Checker's.
func handleCheck(store *configStore, checker *httplimit.Checker, auth authorizer) echo.HandlerFunc {
	return func(c echo.Context) error {
		set := store.load()
		p, err := readParams(c, fieldKey, fieldPolicy, fieldCost)
		if err != nil {
			return err
		}
		key := p.key()
		pol := p.policy(set)
		// The rules in force for this key — an override's, or the
		// policy's — bound its cost.
		rules := pol.Policy
		if !p.failed("key") && !p.failed("policy") {
			rules = checker.PolicyFor(key, pol.Policy)
		}
		cost := 1
		if !p.failed("policy") {
			cost = p.integer("cost", 1, 1, rules.MaxCost())
		}
		if err := p.problem(); err != nil {
			return err
		}
		if err := auth.authorize(c, pol.Name, false); err != nil {
			return err
		}
		res := checker.CheckHTTP(c.Response(), c.Request(), httplimit.Target{Key: key, Policy: rules, Cost: cost})
		switch {
		case !res.Pass:
			return nil // answered: denied, failed closed
		case res.Err != nil:
			return c.JSON(http.StatusOK, failOpenJSON{Allowed: true, FailOpen: true, Key: key, Policy: pol.Name})
		}
		return c.JSONBlob(http.StatusOK, httplimit.NewDecisionBody(res.Decision).AppendJSON(make([]byte, 0, 512)))
	}
}
