package server_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// overviewAnswer is GET /api/v1/overview's body.
type overviewAnswer struct {
	Policy   string `json:"policy"`
	Policies []struct {
		Name         string  `json:"name"`
		Shadow       bool    `json:"shadow"`
		Allowed      float64 `json:"allowed"`
		Denied       float64 `json:"denied"`
		ShadowDenied float64 `json:"shadowDenied"`
		Cached       float64 `json:"cached"`
		Series       rates   `json:"series"`
	} `json:"policies"`
	Top struct {
		Checks []overviewRow `json:"checks"`
		Denied []overviewRow `json:"denied"`
	} `json:"top"`
	NowMs     int64 `json:"nowMs"`
	Instances int   `json:"instances"`
}

type overviewRow struct {
	Key    string `json:"key"`
	Checks int64  `json:"checks"`
	Denied int64  `json:"denied"`
}

func getOverview(t testing.TB, app *apptest.App, policy string, header ...string) overviewAnswer {
	t.Helper()
	r := do(t, "GET", app.URL+"/api/v1/overview?policy="+policy, "", header...)
	if r.status != http.StatusOK {
		t.Fatalf("GET /api/v1/overview?policy=%s: %d %s", policy, r.status, r.raw)
	}
	var o overviewAnswer
	if err := json.Unmarshal([]byte(r.raw), &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// sent counts what a test's checks were answered, per key.
type sent struct {
	mu     sync.Mutex
	checks map[string]int64
	denied map[string]int64 // 429s, or a shadow policy's wouldDeny
	total  int64
}

// traffic sends checks of policy for every key in keys, in random order,
// from eight clients, to apps in turn.
func traffic(t *testing.T, apps []*apptest.App, policy string, keys []string) *sent {
	t.Helper()
	s := &sent{checks: map[string]int64{}, denied: map[string]int64{}}
	rand.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				app := apps[i%len(apps)]
				resp, err := http.Post(app.URL+"/api/v1/check?policy="+policy+"&key="+keys[i], "", nil)
				if err != nil {
					t.Error(err)
					continue
				}
				var body struct {
					WouldDeny bool `json:"wouldDeny"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				s.mu.Lock()
				s.checks[keys[i]]++
				s.total++
				if resp.StatusCode == http.StatusTooManyRequests || body.WouldDeny {
					s.denied[keys[i]]++
				} else if resp.StatusCode != http.StatusOK {
					t.Errorf("check %s: %d", keys[i], resp.StatusCode)
				}
				s.mu.Unlock()
			}
		})
	}
	for i := range keys {
		work <- i
	}
	close(work)
	wg.Wait()
	return s
}

// repeat lists key n times.
func repeat(keys []string, key string, n int) []string {
	for range n {
		keys = append(keys, key)
	}
	return keys
}

// TestOverviewAcrossInstances: with a few heavy clients among hundreds of
// light ones, their checks spread over two instances, both instances' top
// lists name the heavy clients first, in order, counting within 1 % of the
// policy's checks; a shadow policy's would-deny list names its heaviest
// would-be-blocked client.
func TestOverviewAcrossInstances(t *testing.T) {
	url := redistest.URL(t)
	args := []string{"--policy", "api=40/1m", "--policy", "search=30/1m+shadow"}
	a := startApp(t, map[string]string{"REDIS_URL": url}, args...)
	b := startApp(t, map[string]string{"REDIS_URL": url}, args...)

	var api []string
	api = repeat(api, "heavy-a", 300)
	api = repeat(api, "heavy-b", 200)
	api = repeat(api, "heavy-c", 120)
	for i := range 400 { // light clients: 1 or 2 checks each
		api = repeat(api, fmt.Sprintf("light-%d", i), 1+i%2)
	}
	var search []string
	search = repeat(search, "crawler", 150)
	search = repeat(search, "bot", 80)
	for i := range 200 {
		search = repeat(search, fmt.Sprintf("reader-%d", i), 1)
	}
	sentAPI := traffic(t, []*apptest.App{a, b}, "api", api)
	sentSearch := traffic(t, []*apptest.App{a, b}, "search", search)
	if sentAPI.denied["heavy-a"] == 0 || sentSearch.denied["crawler"] == 0 {
		t.Fatalf("the heavy clients were never denied: %v %v", sentAPI.denied, sentSearch.denied)
	}

	for _, app := range []*apptest.App{a, b} {
		o := settle(t, app, "api", sentAPI.total)
		checkTop(t, "api by checks", o.Top.Checks, []string{"heavy-a", "heavy-b", "heavy-c"}, sentAPI)
		checkTop(t, "api by denials", o.Top.Denied, []string{"heavy-a", "heavy-b", "heavy-c"}, sentAPI)
		rates := policyRates(t, o, "api")
		if got := sum(rates.Allowed) + sum(rates.Denied); got != sentAPI.total {
			t.Errorf("api's rates add up to %d checks, sent %d", got, sentAPI.total)
		}
		if got := sum(rates.Denied); got != sum(mapValues(sentAPI.denied)) {
			t.Errorf("api's denied rates add up to %d, got %d 429s", got, sum(mapValues(sentAPI.denied)))
		}

		o = settle(t, app, "search", sentSearch.total)
		checkTop(t, "search by would-denials", o.Top.Denied, []string{"crawler", "bot"}, sentSearch)
		rates = policyRates(t, o, "search")
		if sum(rates.Denied) != 0 || sum(rates.ShadowDenied) != sum(mapValues(sentSearch.denied)) {
			t.Errorf("search (shadow): denied %d, shadowDenied %d; want 0 and %d", sum(rates.Denied), sum(rates.ShadowDenied), sum(mapValues(sentSearch.denied)))
		}
	}
}

// settle polls app's overview of policy until both instances' counts are in
// and the rates hold every check sent (their last second has passed).
func settle(t *testing.T, app *apptest.App, policy string, total int64) overviewAnswer {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		o := getOverview(t, app, policy)
		r := policyRates(t, o, policy)
		if o.Instances == 2 && sum(r.Allowed)+sum(r.Denied)+sum(r.ShadowDenied) >= total {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the overview never held both instances' %d checks: %d instances, %+v", app.URL, total, o.Instances, r)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkTop: rows start with want, in order, each count within 1 % of the
// policy's checks.
func checkTop(t *testing.T, list string, rows []overviewRow, want []string, s *sent) {
	t.Helper()
	if len(rows) < len(want) {
		t.Fatalf("%s: %d rows, want at least %d: %v", list, len(rows), len(want), rows)
	}
	tol := s.total / 100
	for i, k := range want {
		r := rows[i]
		if r.Key != k {
			t.Errorf("%s: row %d is %s, want %s (%v)", list, i, r.Key, k, rows[:len(want)])
			continue
		}
		if d := r.Checks - s.checks[k]; d < -tol || d > tol {
			t.Errorf("%s: %s has %d checks, sent %d (±%d)", list, k, r.Checks, s.checks[k], tol)
		}
		if d := r.Denied - s.denied[k]; d < -tol || d > tol {
			t.Errorf("%s: %s has %d denied, %d were (±%d)", list, k, r.Denied, s.denied[k], tol)
		}
	}
}

// rates are a policy's series: its counts in each of the last 60 seconds.
type rates struct{ Allowed, Denied, ShadowDenied, Cached []int64 }

func policyRates(t *testing.T, o overviewAnswer, name string) rates {
	t.Helper()
	for _, p := range o.Policies {
		if p.Name == name {
			r := p.Series
			for i, series := range [][]int64{r.Allowed, r.Denied, r.ShadowDenied, r.Cached} {
				if len(series) != 60 {
					t.Fatalf("%s: a series of %d seconds, want 60", name, len(series))
				}
				// The rate is the series' mean, per second.
				rate := []float64{p.Allowed, p.Denied, p.ShadowDenied, p.Cached}[i]
				if want := float64(sum(series)) / 60; math.Abs(rate-want) > 0.006 {
					t.Fatalf("%s: rate %v of a series adding up to %d, want %.2f", name, rate, sum(series), want)
				}
			}
			return r
		}
	}
	t.Fatalf("no policy %s in %+v", name, o.Policies)
	return rates{}
}

func sum(ns []int64) int64 {
	var s int64
	for _, n := range ns {
		s += n
	}
	return s
}

func mapValues(m map[string]int64) []int64 { return slices.Collect(maps.Values(m)) }
