// Command ratescope is an exact sliding-window-log rate limiter on Redis with a
// live view of its state in the browser. See README.md.
package main

import (
	"context"
	"fmt"
	"os"
	// The IANA time zones, inside the binary: a policy's +tz=Europe/Berlin
	// must load in a distroless image, which has no /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/ratescope/ratescope/server"
)

func main() {
	if err := server.Run(context.Background(), os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ratescope:", err)
		os.Exit(1)
	}
}
