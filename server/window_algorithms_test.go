package server_test

import (
	"math"
	"testing"
)

// TestWindowEveryAlgorithm: the window answer, the hello and the snapshot
// say which algorithm keeps the window and carry its state, per rule, after
// two checks of 3/1h on a fresh key (real Redis).
func TestWindowEveryAlgorithm(t *testing.T) {
	const windowMs, limit = 3_600_000, 3
	app := startApp(t, map[string]string{
		"RATESCOPE_POLICIES": "plog=3/1h;pfixed=3/1h@fixed;pcounter=3/1h@counter;pgcra=3/1h@gcra;pbucket=3/1h@bucket+shadow",
	})
	states := []string{"fixed", "counter", "gcra", "bucket"}
	for _, tc := range []struct {
		policy, algorithm string
		shadow            bool
		// check reads the rule's state after checks at t1 and t2, read at now.
		check func(t *testing.T, st map[string]any, t1, t2, now int64)
	}{
		{"plog", "log", false, nil},
		{"pfixed", "fixed", false, func(t *testing.T, st map[string]any, t1, _, now int64) {
			start := now / windowMs * windowMs
			if int64(st["windowStartMs"].(float64)) != start {
				t.Errorf("windowStartMs %v, want %d at now %d", st["windowStartMs"], start, now)
			}
			if t1 >= start && st["count"] != 2.0 { // else an edge passed between the checks and the read
				t.Errorf("count %v, want 2", st["count"])
			}
		}},
		{"pcounter", "counter", false, func(t *testing.T, st map[string]any, t1, _, now int64) {
			start := now / windowMs * windowMs
			if int64(st["windowStartMs"].(float64)) != start {
				t.Errorf("windowStartMs %v, want %d at now %d", st["windowStartMs"], start, now)
			}
			weight := float64(windowMs-(now-start)) / windowMs
			if w := st["weight"].(float64); math.Abs(w-weight) > 0.001 {
				t.Errorf("weight %v, want %.3f", w, weight)
			}
			if t1 >= start && (st["currCount"] != 2.0 || st["prevCount"] != 0.0 || st["estimate"] != 2.0) {
				t.Errorf("state %v, want currCount 2, prevCount 0, estimate 2", st)
			}
		}},
		{"pgcra", "gcra", false, func(t *testing.T, st map[string]any, t1, _, _ int64) {
			// From empty the first check puts the TAT at t1 + T, the second at t1 + 2T.
			const T = windowMs / limit
			if st["tatMs"] != float64(t1+2*T) || st["emissionIntervalMs"] != float64(T) {
				t.Errorf("state %v, want tatMs %d, emissionIntervalMs %d", st, t1+2*T, T)
			}
		}},
		{"pbucket", "bucket", true, func(t *testing.T, st map[string]any, _, t2, now int64) {
			want := 1 + float64(now-t2)*limit/windowMs // one left, plus the drip since t2
			if tok := st["tokens"].(float64); tok > want || tok < want-0.001 {
				t.Errorf("tokens %v, want %.4f rounded down", tok, want)
			}
			if st["updatedMs"] != float64(t2) {
				t.Errorf("updatedMs %v, want %d", st["updatedMs"], t2)
			}
		}},
	} {
		t.Run(tc.algorithm, func(t *testing.T) {
			key := newKey()
			q := "key=" + key + "&policy=" + tc.policy
			v := watch(t, app, q, nil)
			hello := v.next("hello", nil)
			if hello["algorithm"] != tc.algorithm || hello["shadow"] != tc.shadow {
				t.Fatalf("hello %v, want algorithm %s, shadow %v", hello, tc.algorithm, tc.shadow)
			}
			var at []int64
			for range 2 {
				r := do(t, "POST", app.URL+"/api/v1/check?"+q, "")
				if r.status != 200 || r.body["allowed"] != true {
					t.Fatalf("check %d %s", r.status, r.raw)
				}
				at = append(at, num(t, r, "nowMs"))
			}
			snap := v.next("snapshot", func(m map[string]any) bool { return m["count"] == 2.0 })
			r := do(t, "GET", app.URL+"/api/v1/window?"+q, "")
			if r.status != 200 {
				t.Fatalf("window %d %s", r.status, r.raw)
			}
			for name, w := range map[string]map[string]any{"snapshot": snap, "window": r.body} {
				if w["algorithm"] != tc.algorithm || w["limit"] != float64(limit) {
					t.Fatalf("%s %v, want algorithm %s", name, w, tc.algorithm)
				}
				rules := w["rules"].([]any)
				if len(rules) != 1 {
					t.Fatalf("%s rules %v", name, rules)
				}
				rule := rules[0].(map[string]any)
				if rule["count"] != 2.0 || rule["remaining"] != 1.0 {
					t.Errorf("%s rule %v, want count 2, remaining 1", name, rule)
				}
				for _, s := range states {
					if _, has := rule[s]; has != (s == tc.algorithm) {
						t.Errorf("%s rule %v: %s present = %v", name, rule, s, has)
					}
				}
				if tc.check == nil {
					if e := w["entries"].([]any); len(e) != 2 {
						t.Errorf("%s entries %v, want 2", name, e)
					}
					continue
				}
				if e := w["entries"].([]any); len(e) != 0 {
					t.Errorf("%s entries %v, want none", name, e)
				}
				tc.check(t, rule[tc.algorithm].(map[string]any), at[0], at[1], int64(w["nowMs"].(float64)))
			}
		})
	}
}
