package limiter

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// luaFunction is a named function of a script, "local function name(" or,
// declared before (a function made only when needed), "function name(",
// to the "end" at its own indent.
var (
	luaFunction = regexp.MustCompile(`(?m)^( *)(?:local )?function (\w+)\(`)
	redisCall   = regexp.MustCompile(`redis\.p?call\('([A-Z]+)'`)
)

// stepsAgainstScript checks that src's steps describe it: the Redis commands
// each step's part of the script may call — directly or through the
// script's functions — are the ones the step names, and nothing before the
// first step calls Redis. It returns what disagrees.
func stepsAgainstScript(src string) []string {
	// The functions, and the main text without their bodies.
	bodies := map[string]string{}
	main := src
	for {
		loc := luaFunction.FindStringSubmatchIndex(main)
		if loc == nil {
			break
		}
		name := main[loc[4]:loc[5]]
		end := regexp.MustCompile(`(?m)^` + main[loc[2]:loc[3]] + `end$`).FindStringIndex(main[loc[1]:])
		if end == nil {
			return []string{"function " + name + " has no end"}
		}
		stop := loc[1] + end[1]
		bodies[name] = main[loc[1]:stop]
		main = main[:loc[0]] + main[stop:]
	}
	calls := func(text string, fns map[string][]string) []string {
		set := map[string]bool{}
		for _, m := range redisCall.FindAllStringSubmatch(text, -1) {
			set[m[1]] = true
		}
		for name, cmds := range fns {
			if regexp.MustCompile(`\b` + name + `\(`).MatchString(text) {
				for _, c := range cmds {
					set[c] = true
				}
			}
		}
		return slices.Sorted(maps.Keys(set))
	}
	// What each function may call, through the others too.
	fns := map[string][]string{}
	for range len(bodies) + 1 {
		next := map[string][]string{}
		for name, body := range bodies {
			next[name] = calls(body, fns)
		}
		fns = next
	}
	var problems []string
	var region strings.Builder
	var step *Step
	settle := func() {
		got := calls(region.String(), fns)
		switch {
		case step == nil && len(got) > 0:
			problems = append(problems, fmt.Sprintf("the script calls %v before its first step", got))
		case step != nil && !slices.Equal(got, slices.Sorted(slices.Values(step.Commands))):
			problems = append(problems, fmt.Sprintf("step %q names %v, its part of the script calls %v", step.Text, step.Commands, got))
		}
		region.Reset()
	}
	for line := range strings.SplitSeq(main, "\n") {
		if m := stepLine.FindStringSubmatch(line); m != nil {
			settle()
			step = &Step{Name: m[1], Commands: strings.Fields(m[2]), Text: m[3]}
			continue
		}
		region.WriteString(line + "\n")
	}
	settle()
	return problems
}

// TestStepsAreTheScript: the steps the page shows for the log are read from
// the check script that runs, and each names exactly the Redis commands its
// part of that script calls — so a step added to the script, or removed,
// fails here until its line says so.
func TestStepsAreTheScript(t *testing.T) {
	d, _ := Describe(Log)
	if len(d.Steps) < 5 {
		t.Fatalf("the log describes %d steps", len(d.Steps))
	}
	if got := parseSteps(lockSrc + quotaSrc + checkSrc); !slices.EqualFunc(got, d.Steps, func(a, b Step) bool {
		return a.Name == b.Name && a.Text == b.Text && slices.Equal(a.Commands, b.Commands)
	}) {
		t.Fatalf("the log's steps are not its script's:\n%v\n%v", d.Steps, got)
	}
	for _, p := range stepsAgainstScript(lockSrc + quotaSrc + checkSrc) {
		t.Error(p)
	}
}

// TestStepsCheckFindsChanges: the check above fails for a call added
// without its step, a step line removed, and a step naming a command its
// part does not call.
func TestStepsCheckFindsChanges(t *testing.T) {
	src := lockSrc + quotaSrc + checkSrc
	timeStep := "-- step now [TIME] "
	if !strings.Contains(src, timeStep) {
		t.Fatal("no TIME step")
	}
	for what, changed := range map[string]string{
		"a call added":                 strings.Replace(src, "local now = ", "redis.call('ZPOPMIN', key)\nlocal now = ", 1),
		"a step removed":               strings.Replace(src, "-- step quotas [GET] ", "-- ", 1),
		"a command named, not called":  strings.Replace(src, timeStep, "-- step now [TIME DEL] ", 1),
		"a call before the first step": strings.Replace(src, "local lockDay", "redis.call('PING')\nlocal lockDay", 1),
	} {
		if changed == src {
			t.Fatalf("%s: the change did not apply", what)
		}
		if len(stepsAgainstScript(changed)) == 0 {
			t.Errorf("%s: not found", what)
		}
	}
}
