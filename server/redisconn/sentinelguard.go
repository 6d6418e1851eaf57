package redisconn

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// guardTimeout bounds one sentinel's answer to the guard: a sentinel that
// does not answer in time is left out.
const guardTimeout = 250 * time.Millisecond

// sentinelGuard keeps ratescope off a node that the sentinels are taking
// away from being the master. go-redis's failover client connects to
// whatever its one sentinel names at that moment; while the sentinels fail a
// crashed master over, they still name it until the promotion is done, and a
// master that comes back empty in that window (no persistence) would take
// writes on empty windows — admissions over the limit that the promoted
// replica never hears of. Before each connection to a data node the guard
// asks every sentinel of the URL (in parallel, guardTimeout each) and refuses
// the node when one of them is failing it over (failover_in_progress, o_down)
// or when the newest view (the highest config epoch) names another master.
// The check then fails and the fail mode answers, until the sentinels agree.
// Connections to sentinels are left alone; with no sentinel answering, the
// guard lets go-redis's choice stand.
type sentinelGuard struct {
	name      string
	sentinels []*redis.SentinelClient

	mu    sync.Mutex
	known map[string]bool // sentinel addresses: the URL's and those they name
}

func newSentinelGuard(opt *redis.FailoverOptions, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *sentinelGuard {
	g := &sentinelGuard{name: opt.MasterName, known: map[string]bool{}}
	for _, addr := range opt.SentinelAddrs {
		g.known[addr] = true
		g.sentinels = append(g.sentinels, redis.NewSentinelClient(&redis.Options{
			Addr: addr, Username: opt.SentinelUsername, Password: opt.SentinelPassword,
			Dialer: dial, DialTimeout: guardTimeout, ReadTimeout: guardTimeout, WriteTimeout: guardTimeout,
			ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 2,
		}))
	}
	return g
}

// view is one sentinel's answer.
type view struct {
	master    string
	epoch     int64
	failing   bool // failing the master over, or agreeing it is down
	sentinels []string
}

// allow is nil when addr may be connected to: a sentinel, or the master the
// sentinels name and are not failing over.
func (g *sentinelGuard) allow(ctx context.Context, addr string) error {
	if g.isSentinel(addr) {
		return nil
	}
	views := g.views(ctx)
	for _, v := range views {
		g.learn(v.sentinels)
	}
	if g.isSentinel(addr) || len(views) == 0 {
		return nil
	}
	newest := slices.MaxFunc(views, func(a, b view) int { return int(a.epoch - b.epoch) })
	if newest.master != addr {
		return fmt.Errorf("failed to connect to %s: the sentinels' newest view (epoch %d) names %s as the master", addr, newest.epoch, newest.master)
	}
	for _, v := range views {
		if v.master == addr && v.failing {
			return fmt.Errorf("failed to connect to %s: the sentinels are failing it over", addr)
		}
	}
	return nil
}

func (g *sentinelGuard) isSentinel(addr string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.known[addr]
}

func (g *sentinelGuard) learn(addrs []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range addrs {
		g.known[a] = true
	}
}

// views asks every sentinel at once; those that fail are left out.
func (g *sentinelGuard) views(ctx context.Context) []view {
	ctx, cancel := context.WithTimeout(ctx, guardTimeout)
	defer cancel()
	out := make([]*view, len(g.sentinels))
	var wg sync.WaitGroup
	for i, s := range g.sentinels {
		wg.Go(func() { out[i] = g.ask(ctx, s) })
	}
	wg.Wait()
	var views []view
	for _, v := range out {
		if v != nil {
			views = append(views, *v)
		}
	}
	return views
}

func (g *sentinelGuard) ask(ctx context.Context, s *redis.SentinelClient) *view {
	m, err := s.Master(ctx, g.name).Result()
	if err != nil {
		return nil
	}
	epoch, _ := strconv.ParseInt(m["config-epoch"], 10, 64)
	flags := strings.Split(m["flags"], ",")
	v := &view{
		master:  net.JoinHostPort(m["ip"], m["port"]),
		epoch:   epoch,
		failing: slices.Contains(flags, "failover_in_progress") || slices.Contains(flags, "o_down"),
	}
	if others, err := s.Sentinels(ctx, g.name).Result(); err == nil {
		for _, o := range others {
			v.sentinels = append(v.sentinels, net.JoinHostPort(o["ip"], o["port"]))
		}
	}
	return v
}

func (g *sentinelGuard) close() {
	for _, s := range g.sentinels {
		_ = s.Close()
	}
}

// tlsFor is conf for the host of addr, or nil without TLS.
func tlsFor(conf *tls.Config, addr string) *tls.Config {
	if conf == nil {
		return nil
	}
	c := conf.Clone()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		c.ServerName = host
	}
	return c
}
