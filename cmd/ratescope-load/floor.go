package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
)

// The fan-out floor: the least time this machine needs to hand one small
// message to N loopback TCP sockets and have another process read it from
// all of them — no WebSocket, no JSON, no hub, no server. One goroutine per
// socket writes, as the server has one per viewer. Whatever ratescope's
// fan-out measures above this, the floor is what no server code can beat on
// this machine; it is how the report says what bounds the 10,000-viewer
// target.
const (
	floorFrame  = 300 // bytes, about a decision message
	floorRounds = 20
)

// floorSinkMain is the reading side, this binary re-executed as
// "ratescope-load floor-sink PORT N": it accepts a control connection and
// then N data connections on 127.0.0.1:PORT, reads frames from all of them,
// and when frame k has arrived on every one, writes "k <ns from send to the
// last arrival>" on the control connection.
func floorSinkMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "floor-sink: want PORT N")
		return 2
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 1 {
		fmt.Fprintln(os.Stderr, "floor-sink: bad N", args[1])
		return 2
	}
	if _, err := raiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, "floor-sink:", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", args[0]))
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor-sink:", err)
		return 1
	}
	defer ln.Close()
	control, err := ln.Accept()
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor-sink:", err)
		return 1
	}
	defer control.Close()

	type round struct {
		seen  int
		worst int64
	}
	var mu sync.Mutex
	rounds := map[uint64]*round{}
	report := make(chan string, floorRounds)
	for range n {
		conn, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "floor-sink:", err)
			return 1
		}
		go func() {
			defer conn.Close()
			buf := make([]byte, floorFrame)
			for {
				if _, err := io.ReadFull(conn, buf); err != nil {
					return
				}
				at := time.Now().UnixNano()
				seq, sent := binary.BigEndian.Uint64(buf), int64(binary.BigEndian.Uint64(buf[8:]))
				mu.Lock()
				r := rounds[seq]
				if r == nil {
					r = &round{}
					rounds[seq] = r
				}
				r.seen++
				r.worst = max(r.worst, at-sent)
				done := r.seen == n
				if done {
					delete(rounds, seq)
				}
				mu.Unlock()
				if done {
					report <- fmt.Sprintf("%d %d\n", seq, r.worst)
				}
			}
		}()
	}
	go func() { _, _ = io.Copy(io.Discard, control) }() // ends when the tool hangs up
	for line := range report {
		if _, err := io.WriteString(control, line); err != nil {
			return 0
		}
	}
	return 0
}

// measureFloor runs the floor for n sockets and returns the last reader's
// latency per round.
func measureFloor(ctx context.Context, e *env, n int) (latencies, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	port, err := redistest.FreePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	sink, err := startChild("the floor sink", filepath.Join(e.dir, "floor-sink.log"), os.Environ(), self,
		"floor-sink", strconv.Itoa(port), strconv.Itoa(n))
	if err != nil {
		return nil, err
	}
	defer sink.stop()
	var control net.Conn
	if err := sink.waitReady(ctx, func() error {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			control = c
		}
		return err
	}); err != nil {
		return nil, err
	}
	defer control.Close()

	// One writer goroutine per socket, woken per frame, as the server's are.
	var wg sync.WaitGroup
	defer wg.Wait()
	frames := make([]chan []byte, 0, n)
	defer func() {
		for _, c := range frames {
			close(c)
		}
	}()
	for range n {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("failed to connect socket %d of %d: %w", len(frames)+1, n, err)
		}
		c := make(chan []byte, 1)
		frames = append(frames, c)
		wg.Go(func() {
			defer conn.Close()
			for f := range c {
				if _, err := conn.Write(f); err != nil {
					return
				}
			}
		})
	}
	if err := sleep(ctx, time.Second); err != nil { // let the sink accept them all
		return nil, err
	}

	replies := bufio.NewScanner(control)
	var out latencies
	for k := range floorRounds {
		f := make([]byte, floorFrame)
		t0 := time.Now()
		binary.BigEndian.PutUint64(f, uint64(k))
		binary.BigEndian.PutUint64(f[8:], uint64(t0.UnixNano()))
		for _, c := range frames {
			c <- f
		}
		if err := control.SetReadDeadline(time.Now().Add(deliveryTimeout)); err != nil {
			return nil, err
		}
		if !replies.Scan() {
			return nil, fmt.Errorf("the floor sink did not report round %d: %w\n%s", k, errors.Join(replies.Err(), io.ErrUnexpectedEOF), sink.logTail())
		}
		var seq, worst int64
		if _, err := fmt.Sscan(replies.Text(), &seq, &worst); err != nil || seq != int64(k) {
			return nil, fmt.Errorf("the floor sink said %q for round %d", replies.Text(), k)
		}
		out = append(out, time.Duration(worst))
		if err := sleep(ctx, time.Until(t0.Add(100*time.Millisecond))); err != nil {
			return nil, err
		}
	}
	return out, nil
}
