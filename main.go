// Command ratescope is an exact sliding-window-log rate limiter on Redis with a
// live view of its state in the browser. See README.md.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/ratescope/ratescope/server"
)

func main() {
	if err := server.Run(context.Background(), os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ratescope:", err)
		os.Exit(1)
	}
}
