package server_test

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSecurityHeaders(t *testing.T) {
	app := startApp(t, nil)
	for _, path := range []string{"/", "/?key=demo&policy=demo", "/api/v1/policies", "/api/v1/check?key=a&policy=demo", "/static/js/main.js"} {
		method := "GET"
		if strings.HasPrefix(path, "/api/v1/check") {
			method = "POST"
		}
		r, raw := doRaw(t, method, app.URL+path, "Origin", "https://evil.example.com")
		_ = raw
		h := r.header
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		for k, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
			if h.Get(k) != want {
				t.Errorf("%s: %s = %q, want %q", path, k, h.Get(k), want)
			}
		}
		if acao := h.Get("Access-Control-Allow-Origin"); acao != "" {
			t.Errorf("%s: Access-Control-Allow-Origin %q: no CORS", path, acao)
		}
	}
	r, body := doRaw(t, "GET", app.URL+"/")
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("page %d %v", r.status, r.header)
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, " style=") {
		t.Fatal("the page has inline script or style, which the CSP forbids")
	}
	if r, _ := doRaw(t, "GET", app.URL+"/?key=a%20b"); r.status != 400 {
		t.Fatalf("page with a bad key: %d", r.status)
	}
}

func TestJSONLogsHoldNoSecrets(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "admintok-123456", "RATESCOPE_API_TOKEN": "apitok-654321"},
		"--log-format", "json", "--policy", "login=5/1m")
	do(t, "POST", app.URL+"/api/v1/check?policy=login&key=a", "", "Authorization", "Bearer apitok-654321")
	do(t, "DELETE", app.URL+"/api/v1/window?policy=login&key=a", "", "Authorization", "Bearer admintok-123456")
	do(t, "DELETE", app.URL+"/api/v1/window?policy=login&key=a", "", "Authorization", "Bearer wrong-guess")
	logs := app.Logs()
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["msg"] == nil || m["level"] == nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
	}
	for _, secret := range []string{"admintok-123456", "apitok-654321", "wrong-guess"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("logs contain %q", secret)
		}
	}
}
