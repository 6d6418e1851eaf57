package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ratescope/ratescope/internal/buildinfo"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/live"
)

// metrics are registered on a registry of the server's own, so several
// servers can run in one process (as the tests do).
type metrics struct {
	reg           *prometheus.Registry
	decisions     *prometheus.CounterVec
	adjustments   *prometheus.CounterVec
	failOpen      *prometheus.CounterVec
	checkDuration prometheus.Histogram
	checksActive  prometheus.Gauge
	redisErrors   *prometheus.CounterVec
	configReloads *prometheus.CounterVec

	connsRefused     prometheus.Counter
	viewers          prometheus.Gauge
	wsRefused        *prometheus.CounterVec
	labRefused       *prometheus.CounterVec
	wsDropped        prometheus.Counter
	pubsubDropped    prometheus.Counter
	pubsubReconnects prometheus.Counter

	redisUp          prometheus.Gauge
	reloadSuccessful prometheus.Gauge
	reloadSuccessAt  prometheus.Gauge
	httpRequests     *prometheus.CounterVec
	httpDuration     *prometheus.HistogramVec
	grpcRequests     *prometheus.CounterVec
	envoyHits        *prometheus.CounterVec
	envoyStats       *envoyStats // counts envoyHits

	waitersHeld    prometheus.Gauge
	waitsServed    prometheus.Counter
	waitsAbandoned prometheus.Counter
	waitsRefused   prometheus.Counter
	leases         *prometheus.CounterVec // by policy and event
	leasesHeld     *prometheus.GaugeVec   // by policy
}

// redisOps are the operations ratescope_redis_errors_total counts, each at
// zero from the start.
var redisOps = []string{"check", "window", "reset", "refund", "settle", "publish", "race", "lab", "override", "lease"}

// live is what the live view keeps.
func (m *metrics) live() live.Metrics {
	return live.Metrics{
		Viewers:          m.viewers,
		DroppedSlow:      m.wsDropped,
		PubSubDropped:    m.pubsubDropped,
		PubSubReconnects: m.pubsubReconnects,
		PublishErrors:    m.redisErrors.WithLabelValues("publish"),
	}
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratescope_decisions_total",
			Help: "Checks decided (by Redis or the local deny cache), by policy and outcome: allowed, denied, or shadow_denied (a shadow policy's would-deny).",
		}, []string{"policy", "outcome"}),
		adjustments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratescope_adjustments_total",
			Help: "Refunds and settles answered (200), by policy and kind (refund or settle), also those that found no entry of the check left and changed nothing.",
		}, []string{"policy", "kind"}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratescope_fail_open_total",
			Help: "Checks allowed without a decision because Redis failed and the fail mode is open.",
		}, []string{"policy"}),
		checkDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratescope_check_duration_seconds",
			Help:    "Time the limiter took to decide one check, including Redis.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5},
		}),
		checksActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratescope_checks_in_flight",
			Help: "Checks waiting for the limiter right now.",
		}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratescope_redis_errors_total",
			Help: "Redis calls that failed or timed out, by operation.",
		}, []string{"op"}),
		configReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratescope_config_reloads_total",
			Help: "Config file reloads, by result: ok (applied) or error (refused; the running config stays).",
		}, []string{"result"}),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratescope_conns_refused_total",
			Help: "TCP connections closed as soon as they were accepted because their client address already held --max-conns-per-client.",
		}),
		wsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratescope_ws_refused_total",
			Help: "WebSocket upgrades refused with 503, by reason: client (the client address held --max-viewers-per-client) or instance (this instance held --max-viewers).",
		}, []string{"reason"}),
		labRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratescope_lab_refused_total",
			Help: "Lab checks refused, by reason: client (429: the client address sent its lab checks for the minute) or labs (503: Redis held --max-labs labs and this one was new).",
		}, []string{"reason"}),
		viewers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratescope_ws_viewers",
			Help: "WebSocket connections watching a window on this instance.",
		}),
		wsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratescope_ws_dropped_slow_total",
			Help: "Viewers disconnected because they fell behind.",
		}),
		pubsubDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratescope_pubsub_dropped_total",
			Help: "Events not sent to other instances because the publish queue was full.",
		}),
		pubsubReconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratescope_pubsub_reconnects_total",
			Help: "Times the Redis Pub/Sub subscription was started over.",
		}),
	}
	m.redisUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ratescope_redis_up",
		Help: "1 while Redis accepts the limiter's writes (what /readyz reports), 0 while it does not.",
	})
	m.redisUp.Set(1) // as readiness assumes until its first probe
	m.reloadSuccessful = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ratescope_config_last_reload_successful",
		Help: "1 when the last reading of the config file was applied, 0 when it was refused (the config before it stays).",
	})
	m.reloadSuccessAt = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ratescope_config_last_reload_success_timestamp_seconds",
		Help: "When the config in force was loaded, in Unix seconds.",
	})
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratescope_http_requests_total",
		Help: "HTTP requests, by route (the route's pattern, e.g. /api/v1/check; unmatched for paths no route serves) and the status code sent.",
	}, []string{"route", "code"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ratescope_http_request_duration_seconds",
		Help:    "Time from a request's arrival to its answer, by route; for the WebSocket streams, how long they were open.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
	}, []string{"route"})
	m.grpcRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratescope_grpc_requests_total",
		Help: "gRPC calls (the Envoy rate limit service, health, reflection), by full method name and status code.",
	}, []string{"method", "code"})
	m.envoyHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratescope_envoy_hits_total",
		Help: "Hits on the limits of envoyproxy/ratelimit's config files, as it counts them, by its statistics key (the limit's name, with values where detailed_metric or value_to_metric ask: per limit the 100 most recently counted, the hits of others under the limit's name) and stat: total_hits, over_limit, near_limit, within_limit, shadow_mode.",
	}, []string{"key", "stat"})
	m.envoyStats = newEnvoyStats(m.envoyHits, envoyStatKeysPerLimit)
	m.waitersHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ratescope_waiters_held",
		Help: "Checks this instance holds right now until the slot they booked (a check with wait), at most --max-waiters.",
	})
	m.waitsServed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratescope_waits_served_total",
		Help: "Checks that booked a slot, were held until it, and were answered allowed.",
	})
	m.waitsAbandoned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratescope_waits_abandoned_total",
		Help: "Checks that booked a slot but whose client went away before it (or the server shut down): their bookings are refunded.",
	})
	m.waitsRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratescope_waits_refused_total",
		Help: "Checks denied at once, with nothing booked, that would have waited for a slot but found this instance holding --max-waiters checks already.",
	})
	m.leases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratescope_leases_total",
		Help: "Lease calls of inflight policies answered by this instance, by policy and event: acquired, refused (every lease was held: 429), renewed, lost (a renew found the lease gone: 404), released (a release that found the lease live), expired (leases whose holders let their lease time run out, found and removed by a lease call here).",
	}, []string{"policy", "event"})
	m.leasesHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ratescope_leases_held",
		Help: "Leases of an inflight policy held across every key, as this instance's lease calls changed them: acquired here, less those released or found expired here. Summed over the instances it is the leases held in all; a lease whose key sees no lease call after it expires stays counted until the instance restarts.",
	}, []string{"policy"})
	build := buildinfo.Read()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "ratescope_build_info",
		Help:        "Always 1; the labels say which build is running.",
		ConstLabels: prometheus.Labels{"version": build.Version, "commit": build.Commit, "goversion": build.GoVersion},
	})
	buildInfo.Set(1)
	m.configReloads.WithLabelValues("ok")
	m.configReloads.WithLabelValues("error")
	m.wsRefused.WithLabelValues(refusedClient)
	m.wsRefused.WithLabelValues(refusedInstance)
	m.labRefused.WithLabelValues(refusedClient)
	m.labRefused.WithLabelValues(refusedLabs)
	for _, op := range redisOps {
		m.redisErrors.WithLabelValues(op)
	}
	m.reg.MustRegister(m.decisions, m.adjustments, m.failOpen, m.checkDuration, m.checksActive, m.redisErrors, m.configReloads,
		m.connsRefused, m.viewers, m.wsRefused, m.labRefused, m.wsDropped, m.pubsubDropped, m.pubsubReconnects,
		m.redisUp, m.reloadSuccessful, m.reloadSuccessAt, m.httpRequests, m.httpDuration, m.grpcRequests, m.envoyHits, buildInfo,
		m.waitersHeld, m.waitsServed, m.waitsAbandoned, m.waitsRefused, m.leases, m.leasesHeld,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// configLoaded records a reading of the config file: applied (ok) at at, or
// refused.
func (m *metrics) configLoaded(ok bool, at time.Time) {
	if !ok {
		m.reloadSuccessful.Set(0)
		return
	}
	m.reloadSuccessful.Set(1)
	m.reloadSuccessAt.Set(float64(at.UnixMilli()) / 1000)
}

// redisStatus follows Redis's state as readiness finds it.
func (m *metrics) redisStatus(up bool) {
	if up {
		m.redisUp.Set(1)
	} else {
		m.redisUp.Set(0)
	}
}

// countLocalDenials exports the deny cache's answers, read from the
// limiter when scraped: the hot path counts them once, in the limiter.
func (m *metrics) countLocalDenials(lim *limiter.Limiter) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ratescope_local_denials_total",
		Help: "Checks denied by the local deny cache without a Redis round trip.",
	}, func() float64 { return float64(lim.DenyCacheStats().Denials) }))
}
