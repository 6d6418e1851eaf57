package server

import (
	"container/list"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratescope/ratescope/server/rls"
)

// envoyStatKeysPerLimit is how many statistics keys that hold request values
// (detailed_metric, value_to_metric) one limit of the envoyproxy/ratelimit
// files keeps as series of their own: the most recently counted ones. Each
// is five series, and clients choose the values: without a bound, every new
// value would be new series for as long as the process runs.
const envoyStatKeysPerLimit = 100

// envoyStatNames are the stat label's values, as envoyproxy/ratelimit names
// its counters.
var envoyStatNames = [...]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"}

// envoyStats counts ratescope_envoy_hits_total, keeping per limit at most
// max keys that differ from the limit's own name. A key pushed out (the one
// counted longest ago) has its hits added to the limit's own name and its
// series deleted, so each limit's sum over its keys only grows, as a
// counter's must, and a later hit on that key starts its series again.
type envoyStats struct {
	vec *prometheus.CounterVec
	max int

	mu     sync.Mutex
	limits map[string]*statKeys // by limit name
}

// statKeys are one limit's keys with series of their own, the most recently
// counted first, each with the hits it has been counted.
type statKeys struct {
	recent *list.List // of *statKey
	byKey  map[string]*list.Element
}

type statKey struct {
	key  string
	hits rls.Hits
}

func newEnvoyStats(vec *prometheus.CounterVec, max int) *envoyStats {
	return &envoyStats{vec: vec, max: max, limits: map[string]*statKeys{}}
}

// count adds what one descriptor added to its statistics.
func (s *envoyStats) count(st rls.Stat, h rls.Hits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := st.Key
	if key != st.Limit {
		s.keep(st, h)
	}
	s.add(key, h)
}

// keep makes st.Key one of its limit's most recent keys, pushing out the
// one counted longest ago when the limit holds max.
func (s *envoyStats) keep(st rls.Stat, h rls.Hits) {
	ks := s.limits[st.Limit]
	if ks == nil {
		ks = &statKeys{recent: list.New(), byKey: map[string]*list.Element{}}
		s.limits[st.Limit] = ks
	}
	if e := ks.byKey[st.Key]; e != nil {
		ks.recent.MoveToFront(e)
		k := e.Value.(*statKey)
		k.hits = sumHits(k.hits, h)
		return
	}
	if ks.recent.Len() >= s.max {
		old := ks.recent.Remove(ks.recent.Back()).(*statKey)
		delete(ks.byKey, old.key)
		s.add(st.Limit, old.hits)
		for _, name := range envoyStatNames {
			s.vec.DeleteLabelValues(old.key, name)
		}
	}
	ks.byKey[st.Key] = ks.recent.PushFront(&statKey{key: st.Key, hits: h})
}

// add adds h to key's series: total_hits always, the others once they count.
func (s *envoyStats) add(key string, h rls.Hits) {
	for i, n := range [...]uint64{h.Total, h.OverLimit, h.NearLimit, h.WithinLimit, h.ShadowMode} {
		if n > 0 || i == 0 {
			s.vec.WithLabelValues(key, envoyStatNames[i]).Add(float64(n))
		}
	}
}

func sumHits(a, b rls.Hits) rls.Hits {
	return rls.Hits{
		Total:       a.Total + b.Total,
		OverLimit:   a.OverLimit + b.OverLimit,
		NearLimit:   a.NearLimit + b.NearLimit,
		WithinLimit: a.WithinLimit + b.WithinLimit,
		ShadowMode:  a.ShadowMode + b.ShadowMode,
	}
}
