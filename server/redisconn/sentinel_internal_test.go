package redisconn

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
)

// TestSentinelURLs: a URL with master_name= is a Sentinel deployment; its
// errors are named, and it cannot also be a cluster.
func TestSentinelURLs(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	rdb, closeRedis, err := Connect(Options{URL: "redis://127.0.0.1:1?master_name=mymaster&addr=127.0.0.1:2", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	closeRedis()
	if _, ok := rdb.(*redis.Client); !ok {
		t.Fatalf("a Sentinel URL gives a %T", rdb)
	}
	for _, c := range []struct {
		opt  Options
		want string
	}{
		{Options{URL: "redis://s1:26379?master_name=mymaster&bogus=1"}, "unexpected option: bogus"},
		{Options{URL: "redis://s1:26379?master_name=mymaster&addr=nohostport"}, "unable to parse addr param"},
		{Options{URL: "redis://s1:26379?master_name=mymaster", Cluster: true}, "exclude each other"},
	} {
		c.opt.Log = log
		_, _, err := Connect(c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s (cluster %v): err %v, want one naming %q", c.opt.URL, c.opt.Cluster, err, c.want)
		}
	}
}

// chunks is a connection that reads out its chunks one Read at a time.
type chunks struct {
	net.Conn
	parts []string
}

func (c *chunks) Read(b []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(b, c.parts[0])
	c.parts = c.parts[1:]
	return n, nil
}

// TestReplicaWatchScan: a READONLY reply is seen wherever reads split it,
// at the stream's start too; the word elsewhere than a reply's start is not.
func TestReplicaWatchScan(t *testing.T) {
	stream := "*2\r\n:1\r\n:2\r\n-READONLY You can't write against a read only replica.\r\n"
	for cut := 1; cut < len(stream); cut++ {
		for _, parts := range [][]string{
			{stream[:cut], stream[cut:]},
			{stream[:cut], stream[cut : cut+min(3, len(stream)-cut)], stream[cut+min(3, len(stream)-cut):]},
		} {
			if !retired(parts...) {
				t.Fatalf("missed READONLY in %q", parts)
			}
		}
	}
	for _, parts := range [][]string{
		{"-READONLY You can't write against a read only replica.\r\n"},
		{"-", "R", "E", "A", "DONLY ", "x\r\n"},
		{"+OK\r\n", "-READONLY x\r\n"},
	} {
		if !retired(parts...) {
			t.Errorf("missed READONLY in %q", parts)
		}
	}
	for _, parts := range [][]string{
		{"$12\r\nREADONLY abc\r\n"},
		{"+OK\r\n", "$10\r\nx-READONLY\r\n"},
		{"-ERR READONLY \r\n"},
	} {
		if retired(parts...) {
			t.Errorf("took %q for a READONLY reply", parts)
		}
	}
}

func retired(parts ...string) bool {
	w := newReplicaWatch(&chunks{parts: parts})
	buf := make([]byte, 64)
	for {
		if _, err := w.Read(buf); err != nil {
			break
		}
	}
	_, err := w.SyscallConn()
	return err != nil
}

// TestReadOnlyRetiresTheConnection: a pipeline whose second reply is
// READONLY (go-redis looks at the first only) retires its connection, so the
// next command dials again — through the sentinels, in a failover client.
func TestReadOnlyRetiresTheConnection(t *testing.T) {
	redistest.Need(t, "redis-server")
	ctx := context.Background()
	master, err := redistest.Launch(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(master.Stop)
	_, port, _ := net.SplitHostPort(master.Addr)
	replica, err := redistest.Launch(ctx, t.TempDir(), "--replicaof", "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Stop)

	c := redis.NewClient(&redis.Options{Addr: replica.Addr, MaxRetries: -1, PoolSize: 1, Dialer: sentinelDialer(time.Second, nil, nil)})
	defer c.Close()
	id := func() int64 { // in a pipeline, as the limiter sends its checks
		t.Helper()
		pipe := c.Pipeline()
		cmd := pipe.ClientID(ctx)
		_, _ = pipe.Exec(ctx)
		id, err := cmd.Result()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := id()
	if again := id(); again != first {
		t.Fatalf("a healthy connection was not reused: %d, then %d", first, again)
	}
	pipe := c.Pipeline()
	get := pipe.Get(ctx, "k")
	set := pipe.Set(ctx, "k", "v", 0)
	_, _ = pipe.Exec(ctx)
	if get.Err() != redis.Nil || set.Err() == nil || !strings.HasPrefix(set.Err().Error(), "READONLY") {
		t.Fatalf("GET: %v, SET: %v; want nil, READONLY", get.Err(), set.Err())
	}
	if next := id(); next == first {
		t.Fatalf("the connection that answered READONLY (client id %s) was used again", strconv.FormatInt(first, 10))
	}
}
