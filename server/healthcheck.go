package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// healthcheck probes /healthz of a server on this machine: the compose
// healthcheck of the distroless image, which has no shell or curl.
func healthcheck(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	addr := getenv("RATESCOPE_ADDR")
	if addr == "" {
		addr = defaultAddr
	}
	fs := flag.NewFlagSet("ratescope healthcheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // an error is returned, and printed once by main
	fs.Usage = func() {}
	fs.StringVar(&addr, "addr", addr, "the server's listen address (RATESCOPE_ADDR)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "Usage: ratescope healthcheck [--addr A]\n\nExits 0 when GET /healthz of the server on this machine answers 200 within 3 s.\n\nFlags:")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return fmt.Errorf("healthcheck: %w", err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("failed to read address %q: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("failed to reach /healthz: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz answered %s", resp.Status)
	}
	return nil
}
