package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
)

// cpuUse is the CPU time the processes of one run used, in cores (CPU seconds
// per wall second); a negative value means unknown.
type cpuUse struct{ gen, server, redis, all float64 }

func (c cpuUse) String() string {
	f := func(v float64) string {
		if v < 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f", v)
	}
	server := ""
	if c.server >= 0 {
		server = " · server " + f(c.server)
	}
	return fmt.Sprintf("load generator %s%s · redis-server %s · anything else (kernel softirq, other processes) %s · whole machine %s of %d cores",
		f(c.gen), server, f(c.redis), f(c.other()), f(c.all), runtime.NumCPU())
}

// other is the CPU used outside the processes measured: the kernel's network
// work on loopback, or someone else's work on a shared machine.
func (c cpuUse) other() float64 {
	if c.all < 0 || c.gen < 0 {
		return -1
	}
	return max(0, c.all-c.gen-max(0, c.server)-max(0, c.redis))
}

// meanCPU averages measurements of equally long slices; an unknown value
// stays unknown.
func meanCPU(cs []cpuUse) cpuUse {
	avg := func(get func(cpuUse) float64) float64 {
		sum := 0.0
		for _, c := range cs {
			if get(c) < 0 {
				return -1
			}
			sum += get(c)
		}
		return sum / float64(max(1, len(cs)))
	}
	return cpuUse{
		gen:    avg(func(c cpuUse) float64 { return c.gen }),
		server: avg(func(c cpuUse) float64 { return c.server }),
		redis:  avg(func(c cpuUse) float64 { return c.redis }),
		all:    avg(func(c cpuUse) float64 { return c.all }),
	}
}

// cpuMeter measures the CPU the load generator (this process), the server and
// redis-server use during one measurement.
type cpuMeter struct {
	server, redis        int // pids; 0 when not ours to watch
	start                time.Time
	gen0, srv0, r0, all0 time.Duration
}

// clockTick is the unit of /proc/<pid>/stat times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

func newCPUMeter(srv *serverProc, rs *redistest.Process) *cpuMeter {
	m := &cpuMeter{}
	if srv != nil {
		m.server = srv.cmd.Process.Pid
	}
	if rs != nil {
		m.redis = rs.Pid()
	}
	m.start = time.Now()
	m.gen0, m.srv0, m.r0, m.all0 = selfCPU(), procCPU(m.server), procCPU(m.redis), machineCPU()
	return m
}

// stop returns the cores used since newCPUMeter.
func (m *cpuMeter) stop() cpuUse {
	wall := time.Since(m.start).Seconds()
	cores := func(pid int, t0, t1 time.Duration) float64 {
		if pid == 0 || t0 < 0 || t1 < 0 {
			return -1
		}
		return (t1 - t0).Seconds() / wall
	}
	return cpuUse{
		gen:    cores(os.Getpid(), m.gen0, selfCPU()),
		server: cores(m.server, m.srv0, procCPU(m.server)),
		redis:  cores(m.redis, m.r0, procCPU(m.redis)),
		all:    cores(1, m.all0, machineCPU()),
	}
}

// machineCPU is the busy time of every core together since boot (all but
// idle and iowait, so including softirq: loopback TCP is processed there,
// partly outside any process); -1 when unknown.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return -1
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -1
		}
		// user nice system idle iowait irq softirq steal guest guest_nice:
		// guest time is already counted in user.
		if i != 3 && i != 4 && i < 8 {
			busy += n
		}
	}
	return time.Duration(busy) * clockTick
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU reads utime+stime of pid from /proc; -1 when unknown.
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command name, which is in parentheses and may hold spaces:
	// state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return -1
	}
	return time.Duration(u+s) * clockTick
}
