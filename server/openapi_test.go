package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// The OpenAPI document is served by the app itself (GET
// /api/v1/openapi.json) and checked here with kin-openapi, which validates
// OpenAPI 3.1 documents with its JSON Schema 2020-12 validator.

// The page and its files are text for the validator, as text/plain is.
func init() {
	text := func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(body)
		return string(b), err
	}
	for _, ct := range []string{"text/html", "text/css", "text/javascript", "image/svg+xml"} {
		openapi3filter.RegisterBodyDecoder(ct, text)
	}
}

// apiDoc fetches app's OpenAPI document, checks that it is a valid OpenAPI
// 3.1 document, and returns it with a router that finds its operations at
// app's address.
func apiDoc(t *testing.T, app *apptest.App) (*openapi3.T, routers.Router) {
	t.Helper()
	r := do(t, "GET", app.URL+"/api/v1/openapi.json", "")
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /api/v1/openapi.json: %d %s", r.status, r.header.Get("Content-Type"))
	}
	return parseDoc(t, []byte(r.raw), app.URL)
}

func parseDoc(t *testing.T, raw []byte, url string) (*openapi3.T, routers.Router) {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatalf("the OpenAPI document does not load: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the OpenAPI document is invalid: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: url}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc, router
}

// exchange is one real request and the answer it got.
type exchange struct {
	req      *http.Request
	reqBody  []byte
	status   int
	header   http.Header
	respBody []byte
}

// call sends a request (headers as name, value pairs) and reads the answer;
// a 101 is closed at once.
func call(t *testing.T, method, url, body string, header ...string) exchange {
	t.Helper()
	x, conn := open(t, method, url, body, header...)
	conn.Close()
	return x
}

// openAPIClient bounds every exchange: no answer may hang a test.
var openAPIClient = &http.Client{Timeout: 30 * time.Second}

// open is call for a stream that stays open until the caller closes it.
func open(t *testing.T, method, url, body string, header ...string) (exchange, io.Closer) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := openAPIClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	var b []byte
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, err = io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
	}
	return exchange{req: req, reqBody: []byte(body), status: resp.StatusCode, header: resp.Header, respBody: b}, resp.Body
}

// conform reports how an exchange strays from the document: an operation it
// does not describe, a status it does not list, or an answer (headers,
// content type, body) its schema rejects. For a 2xx, the request must be one
// the document describes as well.
func conform(router routers.Router, x exchange) error {
	req := x.req.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(x.reqBody))
	route, params, err := router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("no operation for %s %s: %w", req.Method, req.URL.Path, err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if x.status/100 == 2 {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			return fmt.Errorf("the request the server accepted is not one the document describes: %w", err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: x.status, Header: x.header, Options: opts}
	out.SetBodyBytes(x.respBody)
	return openapi3filter.ValidateResponse(context.Background(), out)
}

// must checks one exchange's status and its conformance.
func must(t *testing.T, router routers.Router, want int, x exchange) {
	t.Helper()
	if x.status != want {
		t.Errorf("%s %s: %d, want %d: %s", x.req.Method, x.req.URL.RequestURI(), x.status, want, x.respBody)
		return
	}
	if err := conform(router, x); err != nil {
		t.Errorf("%s %s → %d strays from the OpenAPI document: %v\n%s", x.req.Method, x.req.URL.RequestURI(), x.status, err, x.respBody)
	}
}

const openAPIConfig = `
policies:
  - {name: f, rules: ["3/1m"], algorithm: fixed}
  - {name: c, rules: ["3/1m"], algorithm: counter}
  - {name: g, rules: ["3/1m"], algorithm: gcra}
  - {name: b, rules: ["3/1m"], algorithm: bucket}
  - {name: s, rules: ["1/1m"], shadow: true}
  - {name: login, rules: ["1/1m", "5/1h"]}
  - {name: plan, rules: ["10/1s", "2/month"], timezone: Europe/Berlin}
  - {name: daily, rules: ["1/day"], algorithm: gcra}
  - {name: w, rules: ["1/1s"]}
  - {name: jobs, rules: ["1/inflight"], lease: 2s}
routes:
  - match: {pathPrefix: /login}
    policy: login
    key: header:X-User
`

var wsUpgrade = []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}

func withHeaders(base []string, more ...string) []string { return append(slices.Clone(base), more...) }

// TestOpenAPIDescribesEveryAnswer sends every route the answers it can give
// — 200s, 204, 101, 400, 401, 403, 404, 409, 413, 426, 429 and 503 — and
// validates each against the document the server serves.
func TestOpenAPIDescribesEveryAnswer(t *testing.T) {
	app := startApp(t, map[string]string{
		"RATESCOPE_ADMIN_TOKEN": "adm", "RATESCOPE_API_TOKEN": "api", "RATESCOPE_MAX_VIEWERS_PER_CLIENT": "1",
		"RATESCOPE_MAX_LABS": "1",
	}, "--config", writeConfig(t, openAPIConfig))
	_, router := apiDoc(t, app)
	u := app.URL
	api := []string{"Authorization", "Bearer api"}
	big := `{"key":"` + strings.Repeat("k", 70<<10) + `"}`

	// Checks: allowed, every algorithm, shadow, denied, cached, bad, unauthorized, too large.
	must(t, router, 200, call(t, "POST", u+"/api/v1/check?key=oa1&policy=demo", ""))
	must(t, router, 200, call(t, "POST", u+"/api/v1/check", `{"key":"oa1","policy":"demo","cost":2}`))
	for _, p := range []string{"default", "f", "c", "g", "b", "s", "login"} {
		must(t, router, 200, call(t, "POST", u+"/api/v1/check?key=oa1&policy="+p, "", api...))
		must(t, router, 200, call(t, "GET", u+"/api/v1/window?key=oa1&policy="+p, "", api...))
	}
	must(t, router, 200, call(t, "POST", u+"/api/v1/check?key=oa1&policy=s", "", api...)) // a would-deny
	for i := range 3 {
		x := call(t, "POST", u+"/api/v1/check?key=oa1&policy=demo", "")
		if i < 2 {
			must(t, router, 200, x)
		} else {
			must(t, router, 429, x)
		}
	}
	must(t, router, 429, call(t, "POST", u+"/api/v1/check?key=oa1&policy=demo", "")) // from the deny cache
	must(t, router, 400, call(t, "POST", u+"/api/v1/check?key=bad%20key&policy=demo&cost=x", ""))
	must(t, router, 400, call(t, "POST", u+"/api/v1/check?key=oa1", `{"key":"other"}`))
	must(t, router, 401, call(t, "POST", u+"/api/v1/check?key=oa1&policy=default", ""))
	must(t, router, 413, call(t, "POST", u+"/api/v1/check", big))
	// Waiting: a booked answer, a bad wait, a wait on a policy that cannot book.
	must(t, router, 200, call(t, "POST", u+"/api/v1/check?key=oa1&policy=w", "", api...))
	must(t, router, 200, call(t, "POST", u+"/api/v1/check?key=oa1&policy=w&wait=5s", "", api...))
	must(t, router, 400, call(t, "POST", u+"/api/v1/check?key=oa1&policy=demo&wait=soon", ""))
	must(t, router, 409, call(t, "POST", u+"/api/v1/check", `{"key":"oa1","policy":"b","wait":"1s"}`, api...))

	describeAdjustments(t, router, app, api, big)
	describeOverrides(t, router, app, api)

	// Windows and policies.
	must(t, router, 200, call(t, "GET", u+"/api/v1/window?key=oa1&policy=demo", ""))
	must(t, router, 400, call(t, "GET", u+"/api/v1/window?key=oa1&policy=nope", ""))
	must(t, router, 401, call(t, "GET", u+"/api/v1/window?key=oa1&policy=default", ""))
	must(t, router, 204, call(t, "DELETE", u+"/api/v1/window?key=oa1&policy=demo", ""))
	must(t, router, 204, call(t, "DELETE", u+"/api/v1/window?key=oa1&policy=default", "", "Authorization", "Bearer adm"))
	must(t, router, 401, call(t, "DELETE", u+"/api/v1/window?key=oa1&policy=default", "", api...))

	// Calendar quotas: checks allowed and denied by a quota, their windows,
	// and the usage of every kind of rule.
	for _, p := range []string{"plan", "daily"} {
		must(t, router, 200, call(t, "POST", u+"/api/v1/check?key=oa1&policy="+p, "", api...))
		must(t, router, 200, call(t, "GET", u+"/api/v1/window?key=oa1&policy="+p, "", api...))
		must(t, router, 200, call(t, "GET", u+"/api/v1/usage?key=oa1&policy="+p, "", api...))
	}
	must(t, router, 200, call(t, "POST", u+"/api/v1/check?key=oa1&policy=plan", "", api...))
	must(t, router, 429, call(t, "POST", u+"/api/v1/check?key=oa1&policy=plan", "", api...))
	must(t, router, 429, call(t, "POST", u+"/api/v1/check?key=oa1&policy=daily", "", api...))
	must(t, router, 200, call(t, "GET", u+"/api/v1/usage?key=oa1&policy=demo", ""))
	must(t, router, 200, call(t, "GET", u+"/api/v1/usage?key=oa1&policy=login", "", api...))
	must(t, router, 400, call(t, "GET", u+"/api/v1/usage?key=oa1&policy=nope", ""))
	must(t, router, 401, call(t, "GET", u+"/api/v1/usage?key=oa1&policy=plan", ""))
	must(t, router, 400, call(t, "DELETE", u+"/api/v1/window?key=oa1&key=oa2&policy=demo", ""))
	must(t, router, 200, call(t, "GET", u+"/api/v1/policies", ""))

	// Leases: held, refused, renewed, gone, released, and what does not fit.
	lease := call(t, "POST", u+"/api/v1/leases?key=oa-l&policy=jobs", "", api...)
	must(t, router, 200, lease)
	leaseID := jsonString(t, lease.respBody, "leaseId")
	must(t, router, 429, call(t, "POST", u+"/api/v1/leases", `{"key":"oa-l","policy":"jobs"}`, api...))
	must(t, router, 200, call(t, "GET", u+"/api/v1/window?key=oa-l&policy=jobs", "", api...))
	must(t, router, 200, call(t, "POST", u+"/api/v1/leases/"+leaseID+"/renew?key=oa-l&policy=jobs", "", api...))
	must(t, router, 204, call(t, "DELETE", u+"/api/v1/leases/"+leaseID+"?key=oa-l&policy=jobs", "", api...))
	must(t, router, 204, call(t, "DELETE", u+"/api/v1/leases/"+leaseID+"?key=oa-l&policy=jobs", "", api...))
	must(t, router, 404, call(t, "POST", u+"/api/v1/leases/"+leaseID+"/renew?key=oa-l&policy=jobs", "", api...))
	must(t, router, 400, call(t, "POST", u+"/api/v1/leases/not-a-lease/renew?key=oa-l&policy=jobs", "", api...))
	must(t, router, 400, call(t, "DELETE", u+"/api/v1/leases/not-a-lease?key=bad%20key&policy=jobs", "", api...))
	must(t, router, 400, call(t, "POST", u+"/api/v1/leases?policy=jobs", "", api...))
	must(t, router, 401, call(t, "POST", u+"/api/v1/leases?key=oa-l&policy=jobs", ""))
	must(t, router, 409, call(t, "POST", u+"/api/v1/leases?key=oa-l&policy=demo", ""))
	must(t, router, 409, call(t, "POST", u+"/api/v1/check?key=oa-l&policy=jobs", "", api...))
	must(t, router, 413, call(t, "POST", u+"/api/v1/leases", big))
	must(t, router, 200, call(t, "GET", u+"/api/v1/overview?policy=demo", ""))
	must(t, router, 200, call(t, "GET", u+"/api/v1/overview?policy=s", "", "Authorization", "Bearer adm"))
	must(t, router, 401, call(t, "GET", u+"/api/v1/overview?policy=s", "", api...))
	must(t, router, 400, call(t, "GET", u+"/api/v1/overview?policy=nope", ""))
	must(t, router, 200, call(t, "GET", u+"/api/v1/openapi.json", ""))

	// The race and the lab.
	must(t, router, 200, call(t, "POST", u+"/api/v1/race", `{"key":"oa-race","mode":"atomic","requests":10}`))
	must(t, router, 200, call(t, "POST", u+"/api/v1/race", `{"key":"oa-race","mode":"peekrecord","requests":10,"thinkMs":50}`))
	must(t, router, 200, call(t, "POST", u+"/api/v1/race", `{"key":"oa-race","mode":"reserverefund","requests":10,"thinkMs":0}`))
	must(t, router, 400, call(t, "POST", u+"/api/v1/race", `{"key":"oa-race","mode":"fast"}`))
	must(t, router, 413, call(t, "POST", u+"/api/v1/race", big))
	// Two races on one window at once: one runs (its naive requests think
	// for a second), the other is refused; so is a race of the same client
	// on another window meanwhile.
	both := make(chan exchange, 2)
	for range 2 {
		go func() {
			both <- call(t, "POST", u+"/api/v1/race", `{"key":"oa-busy","mode":"naive","requests":3,"thinkMs":1000}`)
		}()
	}
	second := <-both
	must(t, router, 429, call(t, "POST", u+"/api/v1/race", `{"key":"oa-other","mode":"atomic","requests":2}`))
	first := <-both
	if first.status == 409 {
		first, second = second, first
	}
	must(t, router, 200, first)
	must(t, router, 409, second)
	// The lab needs the API token here (no --public-lab), and holds one lab.
	must(t, router, 200, call(t, "POST", u+"/api/v1/lab/check", `{"lab":"oa","limit":3,"windowMs":10000}`, api...))
	must(t, router, 401, call(t, "POST", u+"/api/v1/lab/check", `{"lab":"oa","limit":3,"windowMs":10000}`))
	must(t, router, 503, call(t, "POST", u+"/api/v1/lab/check", `{"lab":"oa-2","limit":3,"windowMs":10000}`, api...))
	must(t, router, 400, call(t, "POST", u+"/api/v1/lab/check", `{"lab":"oa","limit":0,"windowMs":10}`))
	must(t, router, 413, call(t, "POST", u+"/api/v1/lab/check", big))
	must(t, router, 204, call(t, "DELETE", u+"/api/v1/lab?lab=oa", "", api...))
	must(t, router, 401, call(t, "DELETE", u+"/api/v1/lab?lab=oa", ""))
	must(t, router, 400, call(t, "DELETE", u+"/api/v1/lab?lab=bad%20lab", ""))

	// Forward auth: allowed, denied, a missing key, and a request no route matches.
	must(t, router, 200, call(t, "POST", u+"/forward-auth/login", "", "X-User", "u1"))
	must(t, router, 429, call(t, "POST", u+"/forward-auth/login", "", "X-User", "u1"))
	must(t, router, 400, call(t, "GET", u+"/forward-auth", "", "X-Forwarded-Uri", "/login", "X-Forwarded-Method", "POST"))
	must(t, router, 200, call(t, "PUT", u+"/forward-auth/elsewhere", ""))

	// Streams: the upgrade, a plain GET, bad parameters, a token, a foreign
	// origin, and a client over its cap of viewers.
	must(t, router, 426, call(t, "GET", u+"/ws?key=oa1&policy=demo", ""))
	must(t, router, 400, call(t, "GET", u+"/ws?key=oa1&policy=nope", "", wsUpgrade...))
	must(t, router, 401, call(t, "GET", u+"/ws?key=oa1&policy=default", "", wsUpgrade...))
	must(t, router, 403, call(t, "GET", u+"/ws?key=oa1&policy=demo", "", withHeaders(wsUpgrade, "Origin", "https://evil.example")...))
	must(t, router, 400, call(t, "GET", u+"/ws/lab?lab=bad%20lab", "", wsUpgrade...))
	// One viewer per client here: a stream just closed counts until the
	// server has seen it go, so each upgrade waits for a free place.
	upgrade := func(url string) (exchange, io.Closer) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			x, conn := open(t, "GET", url, "", wsUpgrade...)
			if x.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
				return x, conn
			}
			conn.Close()
		}
	}
	lab, conn := upgrade(u + "/ws/lab?lab=oa")
	conn.Close()
	must(t, router, 101, lab)
	must(t, router, 400, call(t, "GET", u+"/ws/overview?policy=nope", "", wsUpgrade...))
	must(t, router, 401, call(t, "GET", u+"/ws/overview?policy=s", "", withHeaders(wsUpgrade, api...)...))
	ov, conn := upgrade(u + "/ws/overview?policy=demo")
	conn.Close()
	must(t, router, 101, ov)
	held, conn := upgrade(u + "/ws?key=oa1&policy=demo")
	defer conn.Close()
	must(t, router, 101, held)
	must(t, router, 503, call(t, "GET", u+"/ws?key=oa2&policy=demo", "", wsUpgrade...))

	// The pages, static files and the service's own routes.
	must(t, router, 200, call(t, "GET", u+"/", ""))
	must(t, router, 400, call(t, "GET", u+"/?key=bad%20key", ""))
	must(t, router, 200, call(t, "GET", u+"/lab?lab=oa&limit=5&window=10&traffic=burst", ""))
	must(t, router, 400, call(t, "GET", u+"/lab?limit=0", ""))
	must(t, router, 200, call(t, "GET", u+"/overview?policy=demo", ""))
	must(t, router, 200, call(t, "GET", u+"/overview?policy=s", "", "Authorization", "Bearer adm"))
	must(t, router, 401, call(t, "GET", u+"/overview?policy=s", "", api...))
	must(t, router, 400, call(t, "GET", u+"/overview?policy=nope", ""))
	must(t, router, 200, call(t, "GET", u+"/static/app.css", ""))
	must(t, router, 404, call(t, "GET", u+"/static/nope.css", ""))
	must(t, router, 200, call(t, "GET", u+"/healthz", ""))
	must(t, router, 200, call(t, "GET", u+"/readyz", ""))
	must(t, router, 200, call(t, "GET", u+"/healthcheck", ""))
	must(t, router, 200, call(t, "GET", u+"/metrics", ""))
}

// TestOpenAPIRefusals: what an instance with trusted proxies and no admin
// token refuses (403), and every route's answer while Redis does not answer
// in fail-closed mode (503), as the document has them.
func TestOpenAPIRefusals(t *testing.T) {
	proxy := redistest.StartProxy(t, redistest.URL(t))
	app := startApp(t, map[string]string{
		"REDIS_URL": proxy.URL, "RATESCOPE_CHECK_TIMEOUT": "300ms", "RATESCOPE_TRUSTED_PROXIES": "10.0.0.0/8",
	}, "--config", writeConfig(t, openAPIConfig))
	_, router := apiDoc(t, app)
	u := app.URL
	must(t, router, 403, call(t, "POST", u+"/forward-auth/login", "", "X-User", "u1"))
	must(t, router, 403, call(t, "DELETE", u+"/api/v1/window?key=oa1&policy=default", ""))

	id := checkID(t, app, "demo", "oa3", 1)
	proxy.Pause()
	defer proxy.Resume()
	must(t, router, 503, call(t, "POST", u+"/api/v1/check?key=oa3&policy=demo", ""))
	must(t, router, 503, call(t, "POST", u+"/api/v1/refund?key=oa3&policy=demo&id="+id, ""))
	must(t, router, 503, call(t, "POST", u+"/api/v1/settle?key=oa3&policy=demo&id="+id+"&cost=2", ""))
	must(t, router, 503, call(t, "GET", u+"/api/v1/window?key=oa3&policy=demo", ""))
	must(t, router, 503, call(t, "GET", u+"/api/v1/usage?key=oa3&policy=demo", ""))
	must(t, router, 503, call(t, "DELETE", u+"/api/v1/window?key=oa3&policy=demo", ""))
	must(t, router, 503, call(t, "POST", u+"/api/v1/race", `{"key":"oa3","mode":"atomic","requests":2,"thinkMs":0}`))
	must(t, router, 503, call(t, "POST", u+"/api/v1/lab/check", `{"lab":"oa3","limit":3,"windowMs":10000}`))
	must(t, router, 503, call(t, "DELETE", u+"/api/v1/lab?lab=oa3", ""))
	must(t, router, 503, call(t, "POST", u+"/api/v1/leases?key=oa3&policy=jobs", ""))
	must(t, router, 503, call(t, "POST", u+"/api/v1/leases/"+id+"/renew?key=oa3&policy=jobs", ""))
	must(t, router, 503, call(t, "DELETE", u+"/api/v1/leases/"+id+"?key=oa3&policy=jobs", ""))
	waitFor(t, 15*time.Second, "/readyz 503 while Redis hangs", func() bool {
		x := call(t, "GET", u+"/readyz", "")
		if x.status == 503 {
			must(t, router, 503, x)
		}
		return x.status == 503
	})
}

// TestOpenAPICoversEveryRoute: every route the server has (as its metrics
// list them) is a path of the document, and every path of the document is a
// route.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	app := startApp(t, nil)
	doc, _ := apiDoc(t, app)
	documented := map[string]bool{}
	for path := range doc.Paths.Map() {
		// Echo's wildcard in OpenAPI's form: /static/* is /static/{file};
		// and its parameters: /api/v1/leases/:leaseId is
		// /api/v1/leases/{leaseId}.
		documented[regexp.MustCompile(`\{[^}]+\}$`).ReplaceAllString(path, "*")] = true
		documented[regexp.MustCompile(`\{([^}]+)\}`).ReplaceAllString(path, ":$1")] = true
	}
	served := map[string]bool{}
	for _, m := range regexp.MustCompile(`ratescope_http_requests_total\{code="\d+",route="([^"]+)"\}`).FindAllStringSubmatch(metrics(t, app), -1) {
		if m[1] != "unmatched" {
			served[m[1]] = true
		}
	}
	for r := range served {
		if !documented[r] {
			t.Errorf("route %s is not in the OpenAPI document", r)
		}
	}
	for path := range doc.Paths.Map() {
		wildcard := regexp.MustCompile(`\{[^}]+\}$`).ReplaceAllString(path, "*")
		if p := regexp.MustCompile(`\{([^}]+)\}`).ReplaceAllString(path, ":$1"); !served[p] && !served[wildcard] {
			t.Errorf("the OpenAPI document has %s, which no route serves", path)
		}
	}
}

// TestOpenAPIDetectsDrift: the checks above fail when an answer drifts from
// the document — a member missing, a member of another type, a member the
// document does not have, a status it does not list — and when the
// document drifts from the answers.
func TestOpenAPIDetectsDrift(t *testing.T) {
	app := startApp(t, nil)
	doc, router := apiDoc(t, app)
	x := call(t, "POST", app.URL+"/api/v1/check?key=drift&policy=demo", "")
	if err := conform(router, x); err != nil {
		t.Fatalf("the real answer: %v", err)
	}
	for name, body := range map[string]string{
		"a member missing":        strings.Replace(string(x.respBody), `"retryAfterMs":0,`, "", 1),
		"a member's type":         strings.Replace(string(x.respBody), `"remaining":4`, `"remaining":"4"`, 1),
		"a member not in it":      strings.Replace(string(x.respBody), `"allowed":true`, `"allowed":true,"limitHit":false`, 1),
		"null where not nullable": strings.Replace(string(x.respBody), `"key":"drift"`, `"key":null`, 1),
	} {
		if body == string(x.respBody) {
			t.Fatalf("%s: the tampering did not apply to %s", name, x.respBody)
		}
		d := x
		d.respBody = []byte(body)
		if err := conform(router, d); err == nil {
			t.Errorf("%s: an answer that drifted passed: %s", name, body)
		}
	}
	undocumented := x
	undocumented.status = http.StatusTeapot
	if err := conform(router, undocumented); err == nil {
		t.Error("a status the document does not list passed")
	}

	// The document drifting: the decision's remaining documented as a string.
	raw, err := doc.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	doc2, router2 := parseDoc(t, raw, app.URL)
	doc2.Components.Schemas["RuleCount"].Value.Properties["remaining"].Value.Type = &openapi3.Types{"string"}
	if err := conform(router2, x); err == nil {
		t.Error("an answer passed a document that says remaining is a string")
	}
}

// TestOpenAPIKeysOnce: no object of the document names a member twice — a
// JSON reader keeps only the last, so a second "409" of a route silently
// hid the first.
func TestOpenAPIKeysOnce(t *testing.T) {
	src, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, dup := range duplicateKeys(src) {
		t.Errorf("openapi.json names %s twice", dup)
	}
	if got := duplicateKeys([]byte(`{"a":{"409":1,"409":2}}`)); len(got) != 1 {
		t.Fatalf("a duplicate went unseen: %v", got)
	}
}

// duplicateKeys lists the members named twice in one object of a JSON
// document, each with the path of its object.
func duplicateKeys(src []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(src))
	var dups []string
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key := k.(string)
				if seen[key] {
					dups = append(dups, path+"/"+key)
				}
				seen[key] = true
				if err := walk(path + "/" + key); err != nil {
					return err
				}
			}
			_, err = dec.Token() // }
			return err
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if err := walk(fmt.Sprintf("%s/%d", path, i)); err != nil {
					return err
				}
			}
			_, err = dec.Token() // ]
			return err
		}
		return nil
	}
	if err := walk(""); err != nil {
		return append(dups, "(unreadable: "+err.Error()+")")
	}
	return dups
}
