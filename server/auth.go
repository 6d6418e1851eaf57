package server

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// authorizer holds the tokens of SPEC §3.
type authorizer struct {
	adminToken, apiToken string
	// publicLab keeps the lab open to anyone when an API token is set.
	publicLab bool
}

// authorize applies SPEC §3's rules. Resets (admin) of non-demo windows need
// the admin token, and are forbidden when none is configured; checks, windows
// and streams of non-demo windows need the API (or admin) token when an API
// token is configured.
func (a authorizer) authorize(c echo.Context, policy string, admin bool) error {
	if policy == sandboxPolicy {
		return nil
	}
	got, hasBearer := bearer(c.Request())
	if admin {
		if a.adminToken == "" {
			return newProblem(http.StatusForbidden, "resetting a non-demo window needs an admin token, and none is configured")
		}
		if hasBearer && tokenEqual(got, a.adminToken) {
			return nil
		}
		return unauthorized("resetting a non-demo window needs Authorization: Bearer <admin token>")
	}
	if a.apiToken == "" {
		return nil
	}
	if hasBearer && (tokenEqual(got, a.apiToken) || (a.adminToken != "" && tokenEqual(got, a.adminToken))) {
		return nil
	}
	return unauthorized("non-demo policies need Authorization: Bearer <api token>")
}

func unauthorized(detail string) *problem {
	return newProblem(http.StatusUnauthorized, detail).withHeader("WWW-Authenticate", `Bearer realm="ratescope"`)
}

func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// tokenEqual compares in constant time, so response timing reveals nothing
// about how much of a guess was right.
func tokenEqual(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// authorizeAdmin applies the admin rule to every policy, the sandbox
// included: what, e.g. overrides, changes how every client is limited, so
// it needs the admin token (401 without it or with a wrong one), and is
// forbidden when none is configured (403).
func (a authorizer) authorizeAdmin(c echo.Context, what string) error {
	if a.adminToken == "" {
		return newProblem(http.StatusForbidden, what+" need an admin token, and none is configured (--admin-token)")
	}
	if got, ok := bearer(c.Request()); ok && tokenEqual(got, a.adminToken) {
		return nil
	}
	return unauthorized(what + " need Authorization: Bearer <admin token>")
}

// authorizeOverview applies the overview's rule: its top lists name clients,
// so a non-demo policy's overview needs the admin token when one is
// configured (401 otherwise); without one, the API token's rule applies, as
// for a window's stream.
func (a authorizer) authorizeOverview(c echo.Context, policy string) error {
	if policy == sandboxPolicy || (a.adminToken == "" && a.apiToken == "") {
		return nil
	}
	if a.adminToken == "" {
		return a.authorize(c, policy, false)
	}
	if got, ok := bearer(c.Request()); ok && tokenEqual(got, a.adminToken) {
		return nil
	}
	return unauthorized("the overview of a non-demo policy names its clients: it needs Authorization: Bearer <admin token>")
}

// labLocked reports whether the lab's checks and resets need a token: with
// an API token configured, unless --public-lab says the lab stays public.
func (a authorizer) labLocked() bool { return a.apiToken != "" && !a.publicLab }

// authorizeLab applies the lab's rule: open to anyone unless labLocked, then
// the API (or admin) token, as for a non-demo check. Each new lab is new
// state in Redis, which a server that closes its API to strangers closes too.
func (a authorizer) authorizeLab(c echo.Context) error {
	if !a.labLocked() {
		return nil
	}
	if got, ok := bearer(c.Request()); ok && (tokenEqual(got, a.apiToken) || (a.adminToken != "" && tokenEqual(got, a.adminToken))) {
		return nil
	}
	return unauthorized("the lab on this server needs Authorization: Bearer <api token> (it runs with --api-token and without --public-lab)")
}
