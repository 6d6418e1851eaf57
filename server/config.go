package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
)

// Defaults that run the demo with no configuration at all.
const (
	defaultAddr         = ":8080"
	defaultTickInterval = 100 * time.Millisecond
	minTickInterval     = 10 * time.Millisecond
)

// Config is everything the server takes from flags and their environment
// twins. What can change at runtime (policies, trusted proxies, routes) is
// read with the config file into settings (configStore).
type Config struct {
	Addr         string
	RedisURL     string
	RedisCluster bool
	// PolicySpecs are the policies given by --policy or RATESCOPE_POLICIES,
	// as given (validated).
	PolicySpecs    []string
	FailMode       httplimit.FailMode
	CheckTimeout   time.Duration
	AdminToken     string
	APIToken       string
	AllowedOrigins []string
	TickInterval   time.Duration
	LogFormat      string
	// LogLevel is the least level logged: checks are logged at debug.
	LogLevel slog.Level
	// ConfigFile is the YAML config file, re-read on SIGHUP and on change.
	ConfigFile string
	// TrustedProxies are --trusted-proxies' entries (validated); the config
	// file may add more.
	TrustedProxies []string
	// GRPCAddr is where the Envoy rate limit service listens; empty: nowhere.
	GRPCAddr string
	// DenyCacheSize bounds the local deny cache; 0 turns it off.
	DenyCacheSize int
	// EnvoyConfigDir holds envoyproxy/ratelimit's own config files, re-read
	// with the config file; empty: none.
	EnvoyConfigDir string
	// EnvoyCompat makes the gRPC service answer as envoyproxy/ratelimit
	// does, field for field, and decide its files' limits by fixed windows.
	EnvoyCompat bool
	// EnvoyShadow is envoyproxy/ratelimit's SHADOW_MODE: the gRPC service's
	// overall answer is OK whatever its statuses say.
	EnvoyShadow bool
	// EnvoyHeaders are the headers compat answers carry
	// (LIMIT_RESPONSE_HEADERS_ENABLED).
	EnvoyHeaders envoyCompatHeaders
	// EnvoyNearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO: where
	// its near_limit statistics begin (0: its default, 0.8).
	EnvoyNearLimitRatio float64
	// MaxConnsPerClient caps the TCP connections one client address holds to
	// the HTTP listener (trusted proxies exempt); 0: no cap.
	MaxConnsPerClient int
	// MaxViewers and MaxViewersPerClient cap the WebSocket viewers of this
	// instance and of one client address; 0: no cap.
	MaxViewers, MaxViewersPerClient int
	// MaxLabs caps the labs whose state Redis holds at once, across every
	// instance; 0: no cap.
	MaxLabs int
	// PublicLab keeps the lab open to anyone when an API token is set.
	PublicLab bool
	// SnapshotBudget is how many window entries a second this instance's
	// snapshots may read from Redis; 0: no budget.
	SnapshotBudget int
	// MaxWaiters caps the checks this instance holds until their booked
	// slots (a check with wait); 0: none is held, every check answers at
	// once.
	MaxWaiters int
	// DurableReplicas is how many replicas must hold an allowed decision
	// before it is answered (WAIT); 0: none (SPEC §10).
	DurableReplicas int
}

// policyFlags collects repeated --policy flags.
type policyFlags []string

func (p *policyFlags) String() string { return strings.Join(*p, ";") }
func (p *policyFlags) Set(s string) error {
	*p = append(*p, s)
	return nil
}

// errVersion is parseConfig's answer to --version: print the build, exit 0.
var errVersion = errors.New("version requested")

// parseConfig reads flags (args without the program name) over environment
// defaults: a flag given wins over its twin. An error names what the user
// set — the flag, or the environment variable when no flag was given.
// --help prints the usage to usage and returns flag.ErrHelp.
func parseConfig(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	var cfg Config
	var errs []error
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	envDuration := func(name string, def time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: not a duration such as 150ms", name, v))
			return def
		}
		return d
	}
	envBool := func(name string) bool {
		v := getenv(name)
		if v == "" {
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want true or false", name, v))
		}
		return b
	}
	envInt := func(name string, def int) int {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want a whole number", name, v))
			return def
		}
		return n
	}

	fs := flag.NewFlagSet("ratescope", flag.ContinueOnError)
	// Errors are returned, once, and printed by main; --help is printed below.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&cfg.Addr, "addr", env("RATESCOPE_ADDR", defaultAddr), "listen address (RATESCOPE_ADDR)")
	fs.StringVar(&cfg.RedisURL, "redis-url", env("REDIS_URL", ""), "redis:// or rediss:// URL; empty starts an embedded Redis (REDIS_URL)")
	fs.BoolVar(&cfg.RedisCluster, "redis-cluster", envBool("RATESCOPE_REDIS_CLUSTER"), "treat --redis-url as a Redis Cluster (RATESCOPE_REDIS_CLUSTER)")
	var policies policyFlags
	fs.Var(&policies, "policy", "a policy, NAME=LIMIT/WINDOW[,LIMIT/WINDOW…][@ALGORITHM][+shadow]; repeatable (RATESCOPE_POLICIES, ';'-separated)")
	fs.StringVar((*string)(&cfg.FailMode), "fail-mode", env("RATESCOPE_FAIL_MODE", string(httplimit.FailClosed)), "closed or open: the answer when Redis fails (RATESCOPE_FAIL_MODE)")
	fs.DurationVar(&cfg.CheckTimeout, "check-timeout", envDuration("RATESCOPE_CHECK_TIMEOUT", httplimit.DefaultTimeout), "the longest a check waits for Redis (RATESCOPE_CHECK_TIMEOUT)")
	fs.StringVar(&cfg.AdminToken, "admin-token", env("RATESCOPE_ADMIN_TOKEN", ""), "bearer token for resets of non-demo windows (RATESCOPE_ADMIN_TOKEN)")
	fs.StringVar(&cfg.APIToken, "api-token", env("RATESCOPE_API_TOKEN", ""), "bearer token for non-demo checks, windows and streams (RATESCOPE_API_TOKEN)")
	origins := fs.String("allowed-origins", env("RATESCOPE_ALLOWED_ORIGINS", ""), "comma-separated extra WebSocket origins (RATESCOPE_ALLOWED_ORIGINS)")
	fs.DurationVar(&cfg.TickInterval, "tick-interval", envDuration("RATESCOPE_TICK_INTERVAL", defaultTickInterval), "how often viewers get the limiter's clock (RATESCOPE_TICK_INTERVAL)")
	fs.StringVar(&cfg.LogFormat, "log-format", env("RATESCOPE_LOG_FORMAT", "text"), "text or json (RATESCOPE_LOG_FORMAT)")
	logLevel := fs.String("log-level", env("RATESCOPE_LOG_LEVEL", "info"), "debug, info, warn or error; checks are logged at debug (RATESCOPE_LOG_LEVEL)")
	fs.StringVar(&cfg.ConfigFile, "config", env("RATESCOPE_CONFIG", ""), "YAML config file with policies, trusted proxies, forward-auth routes and Envoy mappings; reloaded on SIGHUP and on change (RATESCOPE_CONFIG)")
	proxies := fs.String("trusted-proxies", env("RATESCOPE_TRUSTED_PROXIES", ""), "comma-separated addresses or CIDRs of proxies whose X-Forwarded-For is believed (RATESCOPE_TRUSTED_PROXIES)")
	fs.StringVar(&cfg.EnvoyConfigDir, "envoy-config-dir", env("RATESCOPE_ENVOY_CONFIG_DIR", envoyRuntimeDir(getenv)), "folder of envoyproxy/ratelimit's own *.yaml config files, served by the Envoy rate limit service; reloaded on change (RATESCOPE_ENVOY_CONFIG_DIR, or RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config)")
	fs.BoolVar(&cfg.EnvoyCompat, "envoy-compat", envBool("RATESCOPE_ENVOY_COMPAT"), "answer Envoy rate limit calls exactly as envoyproxy/ratelimit does, its files decided by fixed windows (RATESCOPE_ENVOY_COMPAT)")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", env("RATESCOPE_GRPC_ADDR", ""), "listen address of the Envoy rate limit gRPC service; empty: none, or GRPC_HOST:GRPC_PORT, or :8081 with --envoy-config-dir (RATESCOPE_GRPC_ADDR)")
	fs.IntVar(&cfg.DenyCacheSize, "deny-cache-size", envInt("RATESCOPE_DENY_CACHE_SIZE", limiter.DefaultDenyCacheSize), "how many full windows the local deny cache answers without Redis; 0 turns it off (RATESCOPE_DENY_CACHE_SIZE)")
	fs.IntVar(&cfg.MaxConnsPerClient, "max-conns-per-client", envInt("RATESCOPE_MAX_CONNS_PER_CLIENT", defaultMaxConnsPerClient), "the most TCP connections one client address may hold; trusted proxies are exempt; 0: no cap (RATESCOPE_MAX_CONNS_PER_CLIENT)")
	fs.IntVar(&cfg.MaxViewers, "max-viewers", envInt("RATESCOPE_MAX_VIEWERS", defaultMaxViewers), "the most WebSocket viewers this instance serves; 0: no cap (RATESCOPE_MAX_VIEWERS)")
	fs.IntVar(&cfg.MaxViewersPerClient, "max-viewers-per-client", envInt("RATESCOPE_MAX_VIEWERS_PER_CLIENT", defaultMaxViewersPerClient), "the most WebSocket viewers one client address may open; 0: no cap (RATESCOPE_MAX_VIEWERS_PER_CLIENT)")
	fs.IntVar(&cfg.MaxLabs, "max-labs", envInt("RATESCOPE_MAX_LABS", defaultMaxLabs), "the most labs Redis holds at once, across every instance; a new lab beyond it gets 503; 0: no cap (RATESCOPE_MAX_LABS)")
	fs.BoolVar(&cfg.PublicLab, "public-lab", envBool("RATESCOPE_PUBLIC_LAB"), "keep the lab open to anyone when --api-token is set (RATESCOPE_PUBLIC_LAB)")
	fs.IntVar(&cfg.SnapshotBudget, "snapshot-budget", envInt("RATESCOPE_SNAPSHOT_BUDGET", live.DefaultSnapshotBudget), "window entries a second this instance's snapshots may read from Redis; beyond it snapshots come further apart; 0: no budget (RATESCOPE_SNAPSHOT_BUDGET)")
	fs.IntVar(&cfg.MaxWaiters, "max-waiters", envInt("RATESCOPE_MAX_WAITERS", defaultMaxWaiters), "the most checks with wait this instance holds until their booked slots; beyond it such a check is answered at once, nothing booked; 0: none is held (RATESCOPE_MAX_WAITERS)")
	fs.IntVar(&cfg.DurableReplicas, "durable-replicas", envInt("RATESCOPE_DURABLE_REPLICAS", 0), "answer an allowed check only once this many replicas hold it (WAIT, within the check timeout); 0: don't wait (RATESCOPE_DURABLE_REPLICAS)")
	showVersion := fs.Bool("version", false, "print the version, commit and Go version, and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, usage)
			return Config{}, err
		}
		return Config{}, fmt.Errorf("%w (ratescope --help lists the flags)", err)
	}
	if *showVersion {
		return Config{}, errVersion
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	// setting names a value as the user set it: the flag when one was given,
	// else its environment twin.
	setting := func(flagName, envName, value string) string {
		if given[flagName] || getenv(envName) == "" {
			return fmt.Sprintf("--%s %q", flagName, value)
		}
		return fmt.Sprintf("%s=%q", envName, value)
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q (ratescope --help lists the flags)", fs.Arg(0)))
	}
	if err := envoyDefaults(&cfg, getenv, fs); err != nil {
		errs = append(errs, err)
	}

	specs := []string(policies)
	policySource := "--policy"
	if len(specs) == 0 {
		specs = strings.Split(getenv("RATESCOPE_POLICIES"), ";")
		policySource = "RATESCOPE_POLICIES"
	}
	for _, spec := range specs {
		if spec = strings.TrimSpace(spec); spec != "" {
			cfg.PolicySpecs = append(cfg.PolicySpecs, spec)
		}
	}
	if _, err := parsePolicies(cfg.PolicySpecs); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", policySource, err))
	}
	for p := range strings.SplitSeq(*proxies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.TrustedProxies = append(cfg.TrustedProxies, p)
		}
	}
	if _, err := httplimit.ParseTrustedProxies(cfg.TrustedProxies); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", setting("trusted-proxies", "RATESCOPE_TRUSTED_PROXIES", *proxies), err))
	}
	if cfg.DenyCacheSize < 0 {
		errs = append(errs, fmt.Errorf("%s: want 0 (off) or more", setting("deny-cache-size", "RATESCOPE_DENY_CACHE_SIZE", strconv.Itoa(cfg.DenyCacheSize))))
	}
	for _, c := range []struct {
		flag, env string
		n         int
	}{
		{"max-conns-per-client", "RATESCOPE_MAX_CONNS_PER_CLIENT", cfg.MaxConnsPerClient},
		{"max-viewers", "RATESCOPE_MAX_VIEWERS", cfg.MaxViewers},
		{"max-viewers-per-client", "RATESCOPE_MAX_VIEWERS_PER_CLIENT", cfg.MaxViewersPerClient},
		{"max-labs", "RATESCOPE_MAX_LABS", cfg.MaxLabs},
		{"snapshot-budget", "RATESCOPE_SNAPSHOT_BUDGET", cfg.SnapshotBudget},
	} {
		if c.n < 0 {
			errs = append(errs, fmt.Errorf("%s: want 0 (no cap) or more", setting(c.flag, c.env, strconv.Itoa(c.n))))
		}
	}
	if cfg.MaxWaiters < 0 {
		errs = append(errs, fmt.Errorf("%s: want 0 (hold none) or more", setting("max-waiters", "RATESCOPE_MAX_WAITERS", strconv.Itoa(cfg.MaxWaiters))))
	}
	switch {
	case cfg.DurableReplicas < 0:
		errs = append(errs, fmt.Errorf("%s: want 0 (don't wait) or more", setting("durable-replicas", "RATESCOPE_DURABLE_REPLICAS", strconv.Itoa(cfg.DurableReplicas))))
	case cfg.DurableReplicas > 0 && cfg.RedisURL == "":
		errs = append(errs, fmt.Errorf("%s: the embedded Redis has no replicas to wait for; set --redis-url to a Redis with replicas, or use 0", setting("durable-replicas", "RATESCOPE_DURABLE_REPLICAS", strconv.Itoa(cfg.DurableReplicas))))
	}
	if cfg.GRPCAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.GRPCAddr); err != nil {
			errs = append(errs, fmt.Errorf("%s: want host:port such as :8081", setting("grpc-addr", "RATESCOPE_GRPC_ADDR", cfg.GRPCAddr)))
		}
	}
	for o := range strings.SplitSeq(*origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			cfg.AllowedOrigins = append(cfg.AllowedOrigins, o)
		}
	}
	if cfg.FailMode != httplimit.FailClosed && cfg.FailMode != httplimit.FailOpen {
		errs = append(errs, fmt.Errorf("%s: want closed or open", setting("fail-mode", "RATESCOPE_FAIL_MODE", string(cfg.FailMode))))
	}
	if cfg.CheckTimeout <= 0 {
		errs = append(errs, fmt.Errorf("%s: must be positive", setting("check-timeout", "RATESCOPE_CHECK_TIMEOUT", cfg.CheckTimeout.String())))
	}
	if cfg.TickInterval < minTickInterval {
		errs = append(errs, fmt.Errorf("%s: must be at least %s", setting("tick-interval", "RATESCOPE_TICK_INTERVAL", cfg.TickInterval.String()), minTickInterval))
	}
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("%s: want text or json", setting("log-format", "RATESCOPE_LOG_FORMAT", cfg.LogFormat)))
	}
	if err := cfg.LogLevel.UnmarshalText([]byte(*logLevel)); err != nil || !slices.Contains(logLevels, strings.ToLower(*logLevel)) {
		errs = append(errs, fmt.Errorf("%s: want debug, info, warn or error", setting("log-level", "RATESCOPE_LOG_LEVEL", *logLevel)))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, nil
}

// logLevels are the levels --log-level takes (slog would take "info+2" too).
var logLevels = []string{"debug", "info", "warn", "error"}
