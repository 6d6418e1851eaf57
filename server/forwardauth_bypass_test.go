package server_test

import (
	"fmt"
	"testing"
)

// TestForwardAuthNearestForwardedValues: X-Forwarded-Host and
// X-Forwarded-Method are read as the proxy nearest to ratescope wrote them —
// the last value — and X-Forwarded-Uri from its last line, so a value a
// client sent ahead of the proxy's never decides the route: a client that
// used up POST /login on api.example.com cannot pass by sending its own host,
// method or URI first.
func TestForwardAuthNearestForwardedValues(t *testing.T) {
	app := startApp(t, nil, "--config", writeConfig(t, `
policies:
  - {name: login, rules: ["1/1m"]}
routes:
  - match: {host: api.example.com, methods: [POST], pathPrefix: /login}
    policy: login
`))
	login := []string{"X-Forwarded-Method", "POST", "X-Forwarded-Host", "api.example.com", "X-Forwarded-Uri", "/login"}
	if r := ask(t, "GET", app.URL+"/forward-auth", "", login...); r.status != 200 || r.header.Get("RateLimit") == "" {
		t.Fatalf("first login: %d %v %s", r.status, r.header, r.raw)
	}
	for _, tc := range []struct {
		name   string
		header []string
	}{
		{"host: the client's value first", []string{"X-Forwarded-Method", "POST", "X-Forwarded-Host", "other.example, api.example.com", "X-Forwarded-Uri", "/login"}},
		{"host: the client's line first", []string{"X-Forwarded-Method", "POST", "X-Forwarded-Host", "other.example", "X-Forwarded-Host", "api.example.com", "X-Forwarded-Uri", "/login"}},
		{"method: the client's value first", []string{"X-Forwarded-Method", "GET, POST", "X-Forwarded-Host", "api.example.com", "X-Forwarded-Uri", "/login"}},
		{"method: the client's line first", []string{"X-Forwarded-Method", "GET", "X-Forwarded-Method", "POST", "X-Forwarded-Host", "api.example.com", "X-Forwarded-Uri", "/login"}},
		{"uri: the client's line first", []string{"X-Forwarded-Method", "POST", "X-Forwarded-Host", "api.example.com", "X-Forwarded-Uri", "/elsewhere", "X-Forwarded-Uri", "/login"}},
		{"uri: a comma is part of a path", []string{"X-Forwarded-Method", "POST", "X-Forwarded-Host", "api.example.com", "X-Forwarded-Uri", "/login,x"}},
	} {
		if r := ask(t, "GET", app.URL+"/forward-auth", "", tc.header...); r.status != 429 || r.body["policy"] != "login" {
			t.Errorf("%s: %d %v %s, want the login route's 429", tc.name, r.status, r.header, r.raw)
		}
	}
	// The nearest value decides the other way too: another host is not the route's.
	if r := ask(t, "GET", app.URL+"/forward-auth", "", "X-Forwarded-Method", "POST", "X-Forwarded-Host", "api.example.com, other.example", "X-Forwarded-Uri", "/login"); r.status != 200 || r.header.Get("RateLimit") != "" {
		t.Errorf("nearest host other.example matched the route: %d %v %s", r.status, r.header, r.raw)
	}
}

// TestForwardAuthHeadIsGet: a route for GET limits HEAD too, in both forms
// (X-Forwarded-Method, and the request's own method under the prefix): a
// backend answers HEAD with its GET handler, so HEAD passing unlimited would
// let the same work through.
func TestForwardAuthHeadIsGet(t *testing.T) {
	app := startApp(t, nil, "--config", writeConfig(t, `
policies:
  - {name: feed, rules: ["2/1m"]}
routes:
  - match: {methods: [GET], pathPrefix: /feed}
    policy: feed
`))
	viaHeaders := func(method string) response {
		t.Helper()
		return ask(t, "GET", app.URL+"/forward-auth", "", "X-Forwarded-Method", method, "X-Forwarded-Uri", "/feed")
	}
	if r := viaHeaders("GET"); r.status != 200 || r.header.Get("RateLimit") != `"feed";r=1;t=60` {
		t.Fatalf("GET: %d %v %s", r.status, r.header, r.raw)
	}
	if r := viaHeaders("head"); r.status != 200 || r.header.Get("RateLimit") != `"feed";r=0;t=60` {
		t.Fatalf("HEAD was not counted as the GET route's: %d %v %s", r.status, r.header, r.raw)
	}
	if r := viaHeaders("HEAD"); r.status != 429 || r.body["policy"] != "feed" {
		t.Errorf("HEAD in X-Forwarded-Method passed a used-up GET route: %d %v %s", r.status, r.header, r.raw)
	}
	if r := ask(t, "HEAD", app.URL+"/forward-auth/feed", ""); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Errorf("HEAD under the prefix passed a used-up GET route: %d %v", r.status, r.header)
	}
	// Other methods are still not the route's.
	if r := viaHeaders("POST"); r.status != 200 || r.header.Get("RateLimit") != "" {
		t.Errorf("POST matched a GET route: %d %v", r.status, r.header)
	}
}

// TestForwardAuthKeySourcesNamespaced: on a policy shared by routes keyed by
// ip, header:X-Api-Key and host, a client sending the victim's address as its
// API key or as Host fills a window of its own, never the victim's; each key
// names its sources. A policy whose routes all key alike keeps plain keys,
// shared across its routes.
func TestForwardAuthKeySourcesNamespaced(t *testing.T) {
	app := startApp(t, nil, "--config", writeConfig(t, `
trustedProxies: ["127.0.0.1/32"]
policies:
  - {name: shared, rules: ["2/1m"]}
  - {name: solo, rules: ["2/1m"]}
routes:
  - match: {pathPrefix: /ip/}
    policy: shared
    key: ip
  - match: {pathPrefix: /api/}
    policy: shared
    key: header:X-Api-Key
  - match: {pathPrefix: /host/}
    policy: shared
    key: host
  - match: {pathPrefix: /both/}
    policy: shared
    key: ip+header:X-Api-Key
  - match: {pathPrefix: /solo-a/}
    policy: solo
    key: ip
  - match: {pathPrefix: /solo-b/}
    policy: solo
    key: ip
`))
	const victim, attacker = "203.0.113.7", "198.51.100.9"
	from := func(client, path, host string, header ...string) response {
		t.Helper()
		return ask(t, "GET", app.URL+"/forward-auth"+path, host, append([]string{"X-Forwarded-For", client}, header...)...)
	}
	// The attacker uses up the windows its API key and Host name.
	for _, tc := range []struct {
		path, host string
		header     []string
		key        string
	}{
		{"/api/x", "api.example.com", []string{"X-Api-Key", victim}, "header=X-Api-Key+" + victim},
		{"/host/x", victim, nil, "host+" + victim},
	} {
		for i := 1; i <= 2; i++ {
			if r := from(attacker, tc.path, tc.host, tc.header...); r.status != 200 {
				t.Fatalf("attacker %s %d: %d %s", tc.path, i, r.status, r.raw)
			}
		}
		if r := from(attacker, tc.path, tc.host, tc.header...); r.status != 429 || r.body["key"] != tc.key {
			t.Errorf("attacker %s denied: %d %s, want key %s", tc.path, r.status, r.raw, tc.key)
		}
	}
	// The victim's own window is untouched.
	for i := 1; i <= 2; i++ {
		if r := from(victim, "/ip/x", "api.example.com"); r.status != 200 || r.header.Get("RateLimit") != fmt.Sprintf(`"shared";r=%d;t=60`, 2-i) {
			t.Fatalf("victim's request %d, after the attacker sent its address as API key and Host: %d %v %s", i, r.status, r.header, r.raw)
		}
	}
	if r := from(victim, "/ip/x", "api.example.com"); r.status != 429 || r.body["key"] != "ip+"+victim {
		t.Fatalf("victim denied: %d %s", r.status, r.raw)
	}
	// Several sources: the label lists them.
	from(victim, "/both/x", "", "X-Api-Key", "k1")
	from(victim, "/both/x", "", "X-Api-Key", "k1")
	if r := from(victim, "/both/x", "", "X-Api-Key", "k1"); r.status != 429 || r.body["key"] != "ip/header=X-Api-Key+"+victim+"+k1" {
		t.Fatalf("ip+header:X-Api-Key denied: %d %s", r.status, r.raw)
	}

	// solo's routes both key by ip: plain keys, one window for both routes.
	if r := from(victim, "/solo-a/x", ""); r.status != 200 || r.header.Get("RateLimit") != `"solo";r=1;t=60` {
		t.Fatalf("solo-a: %d %v %s", r.status, r.header, r.raw)
	}
	if r := from(victim, "/solo-b/x", ""); r.status != 200 || r.header.Get("RateLimit") != `"solo";r=0;t=60` {
		t.Fatalf("solo-b shares solo-a's window: %d %v %s", r.status, r.header, r.raw)
	}
	if r := from(victim, "/solo-a/x", ""); r.status != 429 || r.body["key"] != victim {
		t.Fatalf("solo denied: %d %s, want the plain key %s", r.status, r.raw, victim)
	}
	if r := do(t, "GET", app.URL+"/api/v1/window?policy=solo&key="+victim, ""); r.status != 200 || num(t, r, "count") != 2 {
		t.Fatalf("the window of key %s: %d %s", victim, r.status, r.raw)
	}
}
