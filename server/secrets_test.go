package server_test

import (
	"strings"
	"testing"
)

// TestRedisSecretsNeverPrinted: a Redis URL the server cannot use is refused
// with an error that names what is wrong, and neither that error nor
// anything logged before it holds the password — whichever part of the URL
// is malformed, in a URL of ratescope's or in envoyproxy/ratelimit's
// REDIS_URL + REDIS_AUTH.
func TestRedisSecretsNeverPrinted(t *testing.T) {
	const secret = "Sup3rS3cret"
	for _, env := range []map[string]string{
		{"REDIS_URL": "redis://:" + secret + "@127.0.0.1:port/0"},
		{"REDIS_URL": "redis://user:" + secret + "@127.0.0.1:6379/zero"},
		{"REDIS_URL": "redis://:" + secret + "@127.0.0.1:6379/0?dial_timeout=soon"},
		{"REDIS_URL": "rediss://:" + secret + "@redis host:6379/0"},
		{"REDIS_URL": "redis://:" + secret + "@127.0.0.1:6379/0%zz"},
		{"REDIS_URL": "ftp://:" + secret + "@127.0.0.1:6379/0"},
		{"REDIS_URL": "redis://:" + secret + "@127.0.0.1:7001?addr=127.0.0.1:7002&dial_timeout=soon"},
		{"REDIS_URL": "redis://:" + secret + "@127.0.0.1:7001?addr=127.0.0.1:7002&max_retries=many"},
		{"REDIS_URL": "redis://:" + secret + "@127.0.0.1:26379?master_name=m&addr=127.0.0.1:x&sentinel_password=" + secret + "&dial_timeout=x"},
		{"REDIS_URL": "redis://127.0.0.1:26379?master_name=m&password=" + secret + "&max_retries=many"},
		{"REDIS_URL": "redis://127.0.0.1:26379?master_name=m&password=" + secret + "&db=x"},
		{"REDIS_URL": "127.0.0.1:port", "REDIS_AUTH": secret},
		{"REDIS_URL": "bad host:6379", "REDIS_AUTH": "user:" + secret},
		{"REDIS_URL": "127.0.0.1:6379", "REDIS_AUTH": secret, "REDIS_TYPE": "clustre"},
		{"REDIS_URL": "m,127.0.0.1:x%zz", "REDIS_AUTH": secret, "REDIS_TYPE": "sentinel"},
	} {
		out, err := run(t, env)
		if err == nil {
			t.Errorf("%v: started", env)
			continue
		}
		if strings.Contains(err.Error()+out, secret) {
			t.Errorf("%v: the password is printed:\nerror: %v\nlog: %s", env, err, out)
		}
		if !strings.Contains(err.Error(), "Redis") && !strings.Contains(err.Error(), "REDIS_") {
			t.Errorf("%v: the error does not say what is wrong: %v", env, err)
		}
	}
}
