package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/tenants"
)

// startOverrides makes the overrides' store and starts in bg what keeps it
// current. A change of one key's override drops that key's cached denials
// on this instance, a change of a prefix's (or a re-read) the policy's: the
// deny cache never serves a denial made under other rules anyway
// (limiter's entries match the whole definition), but one made under rules
// that come back later could outlive what other instances recorded
// meanwhile.
func startOverrides(bg *background, cfg Config, rdb redis.UniversalClient, store *configStore, lim *limiter.Limiter, m *metrics, log *slog.Logger) *tenants.Store {
	ten := tenants.New(tenants.Deps{
		Redis:    rdb,
		Policies: store.policyNames,
		Changed: func(policy, key string) {
			if key == "" {
				lim.Forget(policy)
			} else {
				lim.ForgetKey(key, policy)
			}
		},
		Timeout: max(cfg.CheckTimeout, tenantsMinTimeout),
		Log:     log,
	})
	m.reg.MustRegister(overridesCollector{ten: ten, store: store})
	bg.run(context.Background(), ten.Run)
	return ten
}

// tenantsMinTimeout bounds the overrides' own reads of Redis from below: a
// hash of 100,000 overrides is read a thousand at a time, in the
// background, where a check's 150 ms would be needlessly tight.
const tenantsMinTimeout = time.Second

// policyNames lists the names of the policies in force: the hashes of
// overrides to read.
func (s *configStore) policyNames() []string {
	ps := s.load().policies
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Policy.Name
	}
	return out
}

// overridesCollector exports ratescope_overrides{policy}: how many
// overrides each policy in force has, read from the store when scraped.
type overridesCollector struct {
	ten   *tenants.Store
	store *configStore
}

var overridesDesc = prometheus.NewDesc("ratescope_overrides",
	"Per-client overrides of each policy's rules, by key or prefix, as this instance holds them.",
	[]string{"policy"}, nil)

func (overridesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- overridesDesc }

func (c overridesCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.store.load().policies {
		ch <- prometheus.MustNewConstMetric(overridesDesc, prometheus.GaugeValue, float64(c.ten.Count(p.Policy.Name)), p.Policy.Name)
	}
}
