package main

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"
)

// TestComposeSentinel: the Sentinel compose file holds together — ratescope's
// Sentinel URL names exactly the sentinel services, for the master name they
// monitor; the monitored host is the master service; and there are at least
// RATESCOPE_DURABLE_REPLICAS + 1 replicas of it, so a promoted replica still
// has the replicas its decisions wait for.
func TestComposeSentinel(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "docker-compose.sentinel.yml")), &compose); err != nil {
		t.Fatal(err)
	}
	var sentinels, replicas []string
	var monitor []string // name, host, port, quorum
	for name, s := range compose.Services {
		cmd := strings.Join(s.Command, " ")
		if strings.Contains(cmd, "--sentinel") {
			sentinels = append(sentinels, name+":26379")
			m := regexp.MustCompile(`sentinel monitor (\S+) (\S+) (\d+) (\d+)`).FindStringSubmatch(cmd)
			if m == nil {
				t.Fatalf("sentinel %s monitors nothing: %s", name, cmd)
			}
			monitor = m[1:]
		}
		if s.Image != "" && s.Image != "redis:7.2-alpine" && name != "ratescope" {
			t.Errorf("service %s runs %s, want the official redis:7.2-alpine", name, s.Image)
		}
	}
	for name, s := range compose.Services {
		if slices.Equal(s.Command[:min(4, len(s.Command))], []string{"redis-server", "--replicaof", monitor[1], monitor[2]}) {
			replicas = append(replicas, name)
		}
	}
	if _, ok := compose.Services[monitor[1]]; !ok {
		t.Fatalf("the sentinels monitor %s, which is no service", monitor[1])
	}
	env := compose.Services["ratescope"].Environment
	opt, err := redis.ParseFailoverURL(env["REDIS_URL"])
	if err != nil {
		t.Fatalf("REDIS_URL %q: %v", env["REDIS_URL"], err)
	}
	slices.Sort(sentinels)
	got := slices.Sorted(slices.Values(opt.SentinelAddrs))
	if !slices.Equal(got, sentinels) || opt.MasterName != monitor[0] {
		t.Errorf("REDIS_URL names sentinels %v and master %q; the file has %v monitoring %q", got, opt.MasterName, sentinels, monitor[0])
	}
	quorum, _ := strconv.Atoi(monitor[3])
	if quorum <= len(sentinels)/2 || quorum > len(sentinels) {
		t.Errorf("quorum %d of %d sentinels: want a majority", quorum, len(sentinels))
	}
	durable, err := strconv.Atoi(env["RATESCOPE_DURABLE_REPLICAS"])
	if err != nil || len(replicas) < durable+1 {
		t.Errorf("RATESCOPE_DURABLE_REPLICAS %q with replicas %v: want at least one more replica than it asks for", env["RATESCOPE_DURABLE_REPLICAS"], replicas)
	}
}
