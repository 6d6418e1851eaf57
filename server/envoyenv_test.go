package server

import (
	"io"
	"strings"
	"testing"
)

// TestEnvoyEnvironment: envoyproxy/ratelimit's own variables configure
// ratescope where ratescope's are unset, so its Deployment needs only a new
// image; ratescope's own, and flags, win.
func TestEnvoyEnvironment(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want func(Config) string // "" when cfg is right, else what is wrong
	}{
		{"redis host:port", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.default:6379"}, nil,
			func(c Config) string { return envWant(c.RedisURL, "redis://redis.default:6379") }},
		{"redis auth and tls", map[string]string{"REDIS_URL": "r:6380", "REDIS_AUTH": "s3cret", "REDIS_TLS": "true"}, nil,
			func(c Config) string { return envWant(c.RedisURL, "rediss://:s3cret@r:6380") }},
		{"redis user and password", map[string]string{"REDIS_URL": "r:6379", "REDIS_AUTH": "app:pw"}, nil,
			func(c Config) string { return envWant(c.RedisURL, "redis://app:pw@r:6379") }},
		{"redis unix socket", map[string]string{"REDIS_URL": "/var/run/redis.sock"}, nil,
			func(c Config) string { return envWant(c.RedisURL, "unix:///var/run/redis.sock") }},
		{"redis cluster", map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:7001,b:7002,c:7003"}, nil,
			func(c Config) string {
				return envWant(c.RedisURL, "redis://a:7001?addr=b%3A7002&addr=c%3A7003") + envWant(c.RedisCluster, true)
			}},
		{"redis sentinel", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s1:26379,s2:26379"}, nil,
			func(c Config) string {
				return envWant(c.RedisURL, "redis://s1:26379?addr=s2%3A26379&master_name=mymaster") + envWant(c.RedisCluster, false)
			}},
		{"ratescope's redis url as it is", map[string]string{"REDIS_URL": "redis://x:1/2", "REDIS_TYPE": "cluster"}, nil,
			func(c Config) string { return envWant(c.RedisURL, "redis://x:1/2") + envWant(c.RedisCluster, false) }},
		{"grpc port", map[string]string{"GRPC_PORT": "9091"}, nil,
			func(c Config) string { return envWant(c.GRPCAddr, ":9091") }},
		{"grpc host and port", map[string]string{"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "9091"}, nil,
			func(c Config) string { return envWant(c.GRPCAddr, "127.0.0.1:9091") }},
		{"ratescope's grpc addr wins", map[string]string{"GRPC_PORT": "9091", "RATESCOPE_GRPC_ADDR": ":7000"}, nil,
			func(c Config) string { return envWant(c.GRPCAddr, ":7000") }},
		{"the flag wins", map[string]string{"GRPC_PORT": "9091"}, []string{"--grpc-addr", ""},
			func(c Config) string { return envWant(c.GRPCAddr, "") }},
		{"runtime folder", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit"}, nil,
			func(c Config) string {
				return envWant(c.EnvoyConfigDir, "/data/ratelimit/config") + envWant(c.GRPCAddr, ":8081")
			}},
		{"runtime app folder", map[string]string{"RUNTIME_SUBDIRECTORY": "rl", "RUNTIME_APPDIRECTORY": "limits"}, nil,
			func(c Config) string { return envWant(c.EnvoyConfigDir, "/srv/runtime_data/current/rl/limits") }},
		{"ratescope's folder wins", map[string]string{"RUNTIME_ROOT": "/data", "RATESCOPE_ENVOY_CONFIG_DIR": "/etc/rl"}, nil,
			func(c Config) string { return envWant(c.EnvoyConfigDir, "/etc/rl") }},
		{"no envoy at all", map[string]string{}, nil,
			func(c Config) string {
				return envWant(c.EnvoyConfigDir, "") + envWant(c.GRPCAddr, "") + envWant(c.EnvoyShadow, false) + envWant(c.EnvoyHeaders.Enabled, false)
			}},
		{"shadow and headers", map[string]string{"SHADOW_MODE": "true", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset"}, nil,
			func(c Config) string {
				h := c.EnvoyHeaders
				return envWant(c.EnvoyShadow, true) + envWant(h.Enabled, true) + envWant(h.Limit, "RateLimit-Limit") + envWant(h.Remaining, "RateLimit-Remaining") + envWant(h.Reset, "X-Reset")
			}},
		{"compat", map[string]string{"RATESCOPE_ENVOY_COMPAT": "true"}, nil,
			func(c Config) string { return envWant(c.EnvoyCompat, true) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseConfig(c.args, func(k string) string { return c.env[k] }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if msg := c.want(cfg); msg != "" {
				t.Fatal(msg)
			}
		})
	}
}

func envWant[T comparable](got, want T) string {
	if got != want {
		return "got " + strings.TrimSpace(strings.ReplaceAll(envString(got), "\n", " ")) + ", want " + envString(want) + "; "
	}
	return ""
}

func envString(v any) string {
	switch v := v.(type) {
	case string:
		return "\"" + v + "\""
	case bool:
		if v {
			return "true"
		}
		return "false"
	}
	return "?"
}

func TestEnvoyEnvironmentErrors(t *testing.T) {
	for env, msg := range map[string]map[string]string{
		`REDIS_TYPE="ring"`:                     {"REDIS_URL": "a:1", "REDIS_TYPE": "ring"},
		`REDIS_TYPE=sentinel wants`:             {"REDIS_URL": "a:1", "REDIS_TYPE": "sentinel"},
		`SHADOW_MODE="maybe"`:                   {"SHADOW_MODE": "maybe"},
		`LIMIT_RESPONSE_HEADERS_ENABLED="sure"`: {"LIMIT_RESPONSE_HEADERS_ENABLED": "sure"},
		`NEAR_LIMIT_RATIO="2"`:                  {"NEAR_LIMIT_RATIO": "2"},
	} {
		_, err := parseConfig(nil, func(k string) string { return msg[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), env) {
			t.Errorf("%v: %v, want an error naming %s", msg, err, env)
		}
	}
}
