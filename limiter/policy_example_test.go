package limiter_test

import (
	"fmt"

	"github.com/ratescope/ratescope/limiter"
)

// ExampleParsePolicy reads the policy syntax of SPEC §1. The algorithm is
// always filled in ("log" when none is named), and rules come back sorted by
// window.
func ExampleParsePolicy() {
	for _, s := range []string{"login=20/1h,5/1m", "api=1000/1m@gcra", "search=50/10s+shadow", "burst=5/1s@bucket+shadow"} {
		p, err := limiter.ParsePolicy(s)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-26s %s algorithm=%s shadow=%v first rule %d per %s\n", s, p.Name, p.Algorithm, p.Shadow, p.Rules[0].Limit, p.Rules[0].Window)
	}
	_, err := limiter.ParsePolicy("api=1000/1fortnight")
	fmt.Println(err)
	// Output:
	// login=20/1h,5/1m           login algorithm=log shadow=false first rule 5 per 1m0s
	// api=1000/1m@gcra           api algorithm=gcra shadow=false first rule 1000 per 1m0s
	// search=50/10s+shadow       search algorithm=log shadow=true first rule 50 per 10s
	// burst=5/1s@bucket+shadow   burst algorithm=bucket shadow=true first rule 5 per 1s
	// policy "api": rule "1000/1fortnight": window must be a Go duration such as 10s, 1m or 24h (or whole days: 1d … 7d), one of day, week, month, or inflight
}

// ExamplePolicy_String writes a policy back as it is configured, each window
// in its largest whole unit, so start-up lines and errors read like the flags.
func ExamplePolicy_String() {
	for _, s := range []string{"default=10/60s", "login=5/1m,20/3600s", "slow=7/90s,100/24h@counter", "search=50/10s+shadow",
		"plan=100000/month,10/1s+tz=America/New_York"} {
		p, err := limiter.ParsePolicy(s)
		if err != nil {
			panic(err)
		}
		fmt.Println(p)
	}
	// Output:
	// default=10/1m
	// login=5/1m,20/1h
	// slow=7/90s,100/24h@counter
	// search=50/10s+shadow
	// plan=10/1s,100000/month+tz=America/New_York
}
