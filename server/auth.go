package server

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
)

// sandboxPolicy is the public policy: anyone may check, watch, reset and race it.
const sandboxPolicy = limiter.DemoPolicy

// authorizer holds the tokens of SPEC §3.
type authorizer struct {
	adminToken, apiToken string
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
