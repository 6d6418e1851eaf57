package server

import (
	"flag"
	"fmt"
	"io"

	"github.com/ratescope/ratescope/limiter"
)

// printUsage is ratescope --help: the synopsis, the policy syntax and every
// flag with its environment twin.
func printUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, `ratescope — an exact sliding-window rate limiter on Redis, with a live view in the browser

Usage:
  ratescope [flags]                  serve the page, the HTTP API and (with --grpc-addr) Envoy's
                                     rate limit service; with no --redis-url, on an embedded Redis
  ratescope healthcheck [--addr A]   exit 0 when the server on this machine answers /healthz
                                     (the container's healthcheck; A defaults to RATESCOPE_ADDR)
  ratescope --version                print the version, commit and Go version
  ratescope --help                   this text

Policies (--policy, repeatable, or RATESCOPE_POLICIES separated by ';'):
  NAME=LIMIT/WINDOW[,LIMIT/WINDOW…][@ALGORITHM][+shadow][+lock=DURATION][+tz=ZONE]
  e.g. login=5/1m,20/1h   api=1000/1m@gcra   search=50/10s+shadow
       plan=10/1s,100000/month+tz=America/New_York
  NAME is [a-z0-9_-]{1,32}; WINDOW a duration of whole seconds, 1s to 168h, or day, week
  or month for a calendar quota (in ZONE, default UTC); ALGORITHM one of %s
  (default %s); +shadow decides and records but always allows; +lock locks a denied key out.
  %s exist unless redefined.

Flags (each has an environment twin, in brackets; a flag wins over it):
`, limiter.AlgorithmNames(), limiter.Log, builtinPoliciesText())
	fs.VisitAll(func(f *flag.Flag) {
		kind, help := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  --%s %s\n        %s", f.Name, kind, help)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			fmt.Fprintf(w, "; default %s", f.DefValue)
		}
		fmt.Fprintln(w)
	})
	fmt.Fprintln(w, `
Documentation: https://github.com/ratescope/ratescope/tree/main/docs`)
}
