package limiter

import (
	"regexp"
	"strings"
)

// Step is one step of what a decision does in Redis, in the order its script
// runs them: the Redis commands the step may call and what it does, in a
// line for people. A teaching page or a runbook shows them; they are read
// from the script itself (its "-- step name [COMMANDS] text" lines), and a
// test holds every step's commands to the calls the script makes there, so
// the steps cannot describe a script that no longer runs. Name is the
// step's handle: an explanation of one decision puts that decision's
// numbers beside the step of that name (httplimit.Explain).
type Step struct {
	Name     string   `json:"name"`
	Commands []string `json:"commands"`
	Text     string   `json:"text"`
}

// stepLine is a step's line in a script: "-- step now [TIME] text".
var stepLine = regexp.MustCompile(`^\s*-- step ([a-z]+) \[([A-Z ]*)\] (.+)$`)

// parseSteps reads the steps of a script, in order.
func parseSteps(src string) []Step {
	var steps []Step
	for line := range strings.SplitSeq(src, "\n") {
		m := stepLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		steps = append(steps, Step{Name: m[1], Commands: strings.Fields(m[2]), Text: m[3]})
	}
	return steps
}
