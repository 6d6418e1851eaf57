package server

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
)

// envoyproxy/ratelimit's environment, read where ratescope's own settings
// are unset, so its container can be replaced with only the image changed.

// envoyDefaults fills what cfg leaves unset from envoyproxy/ratelimit's
// environment: the gRPC address, a REDIS_URL without a scheme, SHADOW_MODE
// and the compat headers. Flags given on the command line win.
func envoyDefaults(cfg *Config, getenv func(string) string, fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	if cfg.GRPCAddr == "" && !given["grpc-addr"] {
		cfg.GRPCAddr = envoyGRPCAddr(getenv, cfg.EnvoyConfigDir)
	}
	if cfg.RedisURL != "" && !strings.Contains(cfg.RedisURL, "://") {
		u, cluster, err := envoyRedisURL(cfg.RedisURL, getenv)
		if err != nil {
			errs = append(errs, err)
		}
		cfg.RedisURL, cfg.RedisCluster = u, cfg.RedisCluster || cluster
	}
	if v := getenv("SHADOW_MODE"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("SHADOW_MODE=%q: want true or false", v))
		}
		cfg.EnvoyShadow = b
	}
	if v := getenv("NEAR_LIMIT_RATIO"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 || r > 1 {
			errs = append(errs, fmt.Errorf("NEAR_LIMIT_RATIO=%q: want a fraction such as 0.8", v))
		}
		cfg.EnvoyNearLimitRatio = r
	}
	h, err := readEnvoyCompatHeaders(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	cfg.EnvoyHeaders = h
	return errors.Join(errs...)
}

// envoyGRPCPort is envoyproxy/ratelimit's gRPC port when GRPC_PORT is unset.
const envoyGRPCPort = "8081"

// envoyRuntimeDir is where envoyproxy/ratelimit reads its files from,
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, when RUNTIME_ROOT
// or RUNTIME_SUBDIRECTORY is set; "" otherwise.
func envoyRuntimeDir(getenv func(string) string) string {
	root, sub := getenv("RUNTIME_ROOT"), getenv("RUNTIME_SUBDIRECTORY")
	if root == "" && sub == "" {
		return ""
	}
	if root == "" {
		root = "/srv/runtime_data/current"
	}
	app := getenv("RUNTIME_APPDIRECTORY")
	if app == "" {
		app = "config"
	}
	return filepath.Join(root, sub, app)
}

// envoyGRPCAddr is GRPC_HOST:GRPC_PORT when GRPC_PORT is set, or
// envoyproxy/ratelimit's default :8081 when its files are served (its
// manifests often leave the port to the default); "" otherwise.
func envoyGRPCAddr(getenv func(string) string, envoyDir string) string {
	port := getenv("GRPC_PORT")
	if port == "" && envoyDir == "" {
		return ""
	}
	if port == "" {
		port = envoyGRPCPort
	}
	return net.JoinHostPort(getenv("GRPC_HOST"), port)
}

// envoyRedisURL turns envoyproxy/ratelimit's REDIS_URL, which has no scheme
// — host:port, a socket path, host:port,host:port… for a cluster, or
// master,sentinel,sentinel… — into ratescope's URL, reading REDIS_TYPE
// (single, cluster or sentinel), REDIS_AUTH ([user:]password), REDIS_TLS
// and REDIS_SOCKET_TYPE beside it. cluster reports a Redis Cluster.
func envoyRedisURL(raw string, getenv func(string) string) (u string, cluster bool, err error) {
	scheme := "redis"
	if b, _ := strconv.ParseBool(getenv("REDIS_TLS")); b {
		scheme = "rediss"
	}
	var auth *url.Userinfo
	if a := getenv("REDIS_AUTH"); a != "" {
		if user, pass, ok := strings.Cut(a, ":"); ok {
			auth = url.UserPassword(user, pass)
		} else {
			auth = url.UserPassword("", a)
		}
	}
	parts := strings.Split(raw, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	out := url.URL{Scheme: scheme, User: auth}
	q := url.Values{}
	switch typ := strings.ToLower(getenv("REDIS_TYPE")); typ {
	case "", "single":
		if strings.EqualFold(getenv("REDIS_SOCKET_TYPE"), "unix") || strings.HasPrefix(raw, "/") {
			out.Scheme, out.Path = "unix", raw
			return out.String(), false, nil
		}
		out.Host = raw
	case "cluster":
		out.Host, cluster = parts[0], true
		for _, p := range parts[1:] {
			q.Add("addr", p)
		}
	case "sentinel":
		if len(parts) < 2 {
			return "", false, fmt.Errorf("REDIS_URL=%q: REDIS_TYPE=sentinel wants <master name>,<sentinel>,…", raw)
		}
		out.Host = parts[1]
		q.Set("master_name", parts[0])
		for _, p := range parts[2:] {
			q.Add("addr", p)
		}
	default:
		return "", false, fmt.Errorf("REDIS_TYPE=%q: want single, cluster or sentinel", typ)
	}
	out.RawQuery = q.Encode()
	return out.String(), cluster, nil
}

// envoyCompatHeaders are the names of the headers compat answers carry when
// LIMIT_RESPONSE_HEADERS_ENABLED is true (LIMIT_LIMIT_HEADER and its
// siblings rename them, as in envoyproxy/ratelimit).
type envoyCompatHeaders struct {
	Enabled                 bool
	Limit, Remaining, Reset string
}

func readEnvoyCompatHeaders(getenv func(string) string) (envoyCompatHeaders, error) {
	h := envoyCompatHeaders{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}
	if v := getenv("LIMIT_RESPONSE_HEADERS_ENABLED"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return h, fmt.Errorf("LIMIT_RESPONSE_HEADERS_ENABLED=%q: want true or false", v)
		}
		h.Enabled = b
	}
	for _, f := range []struct {
		env string
		to  *string
	}{{"LIMIT_LIMIT_HEADER", &h.Limit}, {"LIMIT_REMAINING_HEADER", &h.Remaining}, {"LIMIT_RESET_HEADER", &h.Reset}} {
		if v := getenv(f.env); v != "" {
			*f.to = v
		}
	}
	return h, nil
}
