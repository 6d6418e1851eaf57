package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ratescope/ratescope/internal/apptest"
)

// overviewState is what the overview tests read from the page, by
// data-testid.
type overviewState struct {
	Status   string            `json:"status"`
	Policies map[string]string `json:"policies"` // overview-policy-<name> → its text
	Checks   []overviewRow     `json:"checks"`
	Denied   []overviewRow     `json:"denied"`
	ScrollW  int64             `json:"scrollW"`
	InnerW   int64             `json:"innerW"`
}

type overviewRow struct {
	Key    string `json:"key"`
	Checks string `json:"checks"`
	Denied string `json:"denied"`
	Href   string `json:"href"`
}

const overviewStateJS = `(() => {
  const rows = (id) => Array.from(document.querySelectorAll('[data-testid="' + id + '"] [data-testid="overview-key"]'), (a) => ({
    key: a.getAttribute('data-key'), checks: a.getAttribute('data-checks'), denied: a.getAttribute('data-denied'),
    href: a.getAttribute('href'),
  }));
  const policies = {};
  for (const el of document.querySelectorAll('[data-testid^="overview-policy-"]')) {
    policies[el.getAttribute('data-testid').slice('overview-policy-'.length)] = el.textContent.replace(/\s+/g, ' ').trim();
  }
  const st = document.getElementById('overview-status');
  return {
    status: st ? st.textContent.trim() : '', policies: policies,
    checks: rows('overview-top-checks'), denied: rows('overview-top-denied'),
    scrollW: document.documentElement.scrollWidth, innerW: window.innerWidth,
  };
})()`

// waitOverview polls the overview page until cond holds.
func (tb *tab) waitOverview(what string, cond func(overviewState) bool) overviewState {
	tb.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		s := evaluate[overviewState](tb, overviewStateJS)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			tb.t.Fatalf("%s: %s: not within %v; last state %+v", tb.name, what, waitTimeout, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sendChecks sends n checks of key under policy from four clients at once.
func sendChecks(t *testing.T, base, policy, key string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	work := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for range work {
				resp, err := http.Post(base+"/api/v1/check?policy="+policy+"&key="+key, "", nil)
				if err != nil {
					t.Error(err)
					continue
				}
				resp.Body.Close()
			}
		})
	}
	for range n {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
}

// TestOverview: under traffic, the overview lists the heaviest clients
// first, by checks and by denials, each row a link to its live window; a
// new heavy client appears without a reload; every policy shows its rates;
// a row opens that window; the main page and the lab link to the overview.
func TestOverview(t *testing.T) {
	e := start(t, "--policy", "api=20/1m", "--policy", "search=10/1m+shadow")
	base := e.app.URL
	sendChecks(t, base, "api", "heavy-a", 60)
	sendChecks(t, base, "api", "heavy-b", 40)
	for i := range 30 {
		sendChecks(t, base, "api", fmt.Sprintf("light-%d", i), 1)
	}
	sendChecks(t, base, "search", "crawler", 25)

	tb := openTab(t, browser(t), "overview")
	tb.run("emulate a 1280×800 viewport", chromedp.EmulateViewport(1280, 800))
	tb.run("open the overview", chromedp.Navigate(base+"/overview?policy=api"))
	s := tb.waitOverview("heavy-a and heavy-b first, live", func(s overviewState) bool {
		return s.Status == "live" && len(s.Checks) >= 2 && s.Checks[0].Key == "heavy-a" && s.Checks[1].Key == "heavy-b"
	})
	if r := s.Checks[0]; r.Checks != "60" || r.Denied != "40" || r.Href != "/?key=heavy-a&policy=api" {
		t.Errorf("the first row %+v; want heavy-a with 60 checks, 40 denied, linking to its window", r)
	}
	if len(s.Denied) < 2 || s.Denied[0].Key != "heavy-a" || s.Denied[1].Key != "heavy-b" || s.Denied[1].Denied != "20" {
		t.Errorf("the denied list %+v; want heavy-a, then heavy-b with 20", s.Denied)
	}
	for _, p := range []string{"default", "demo", "api", "search"} {
		if _, ok := s.Policies[p]; !ok {
			t.Errorf("no overview-policy-%s on the page: %v", p, s.Policies)
		}
	}
	if !strings.Contains(s.Policies["search"], "shadow") {
		t.Errorf("the shadow policy's card does not say so: %q", s.Policies["search"])
	}

	// A new heavy client shows up, with no reload, ahead of the others.
	sendChecks(t, base, "api", "heavy-new", 90)
	s = tb.waitOverview("heavy-new first", func(s overviewState) bool {
		return len(s.Checks) > 0 && s.Checks[0].Key == "heavy-new" && s.Checks[0].Checks == "90"
	})
	if !strings.Contains(s.Policies["api"], "/s") {
		t.Errorf("the api card shows no rate: %q", s.Policies["api"])
	}
	shot(t, tb, 1280, "")

	// A row opens that client's live window.
	tb.run("open heavy-new's window", chromedp.Click(`[data-testid="overview-top-checks"] [data-testid="overview-key"]`, chromedp.NodeVisible),
		chromedp.WaitVisible(byTestID("clock")))
	tb.waitFor("the window of heavy-new, live", func(s pageState) bool { return s.Status == "live" })
	if got := evaluate[string](tb, `document.querySelector('[data-testid="key"]').value + '|' + document.querySelector('[data-testid="policy"]').value`); got != "heavy-new|api" {
		t.Errorf("the row opened %q, want heavy-new|api", got)
	}
	// The main page and the lab link back.
	for _, page := range []string{"/", "/lab"} {
		tb.run("open "+page, chromedp.Navigate(base+page))
		if href := evaluate[string](tb, `(document.querySelector('[data-testid="overview-link"]') || {}).pathname || ''`); href != "/overview" {
			t.Errorf("%s links the overview as %q", page, href)
		}
	}

	// A shadow policy's overview lists whom it would block.
	tb.run("open search's overview", chromedp.Navigate(base+"/overview?policy=search"))
	s = tb.waitOverview("crawler would be blocked", func(s overviewState) bool {
		return s.Status == "live" && len(s.Denied) > 0 && s.Denied[0].Key == "crawler"
	})
	if s.Denied[0].Denied != "15" {
		t.Errorf("crawler would have been denied %s times, want 15", s.Denied[0].Denied)
	}
}

// TestOverviewNarrow: at 390 px the overview does not scroll sideways.
func TestOverviewNarrow(t *testing.T) {
	e := start(t)
	sendChecks(t, e.app.URL, "demo", "a-rather-long-client-key-from-a-phone-0123456789", 8)
	tb := openTab(t, browser(t), "overview")
	tb.run("emulate a 390×844 viewport", chromedp.EmulateViewport(390, 844))
	tb.run("open the overview", chromedp.Navigate(e.app.URL+"/overview"))
	s := tb.waitOverview("live with a row", func(s overviewState) bool { return s.Status == "live" && len(s.Checks) == 1 })
	if s.ScrollW > 390 {
		t.Errorf("at 390 px the overview scrolls sideways: scrollWidth %d", s.ScrollW)
	}
}

// TestOverviewTwoInstances: steady traffic over two instances — a few heavy
// clients among hundreds of light ones — reaches the page of either as one
// overview: both instances counted, the heaviest client first with the
// checks of both, its sparkline moving. RATESCOPE_SCREENSHOT=1 writes
// docs/overview.png from it.
func TestOverviewTwoInstances(t *testing.T) {
	e := start(t, "--policy", "api=50/1m", "--policy", "search=30/1m+shadow")
	other := apptest.Start(t, map[string]string{"REDIS_URL": "redis://" + e.rdb.Options().Addr, "RATESCOPE_CHECK_TIMEOUT": "3s"},
		"--policy", "api=50/1m", "--policy", "search=30/1m+shadow")
	ctx, stop := context.WithCancel(context.Background())
	var sent sync.WaitGroup
	var heaviest [2]int64 // checks of mobile-app-7 sent to each instance
	for i, base := range []string{e.app.URL, other.URL} {
		sent.Go(func() { heaviest[i] = steadyTraffic(ctx, base, uint64(i)) })
	}
	defer func() { stop(); sent.Wait() }()

	tb := openTab(t, browser(t), "overview")
	tb.run("emulate a 1280×800 viewport", chromedp.EmulateViewport(1280, 800))
	tb.run("open the overview", chromedp.Navigate(other.URL+"/overview?policy=api"))
	tb.waitOverview("both instances, mobile-app-7 first", func(s overviewState) bool {
		return s.Status == "live" && len(s.Checks) >= 20 && s.Checks[0].Key == "mobile-app-7" && len(s.Denied) > 0 &&
			evaluate[string](tb, `document.getElementById('overview-instances').textContent`) == "2"
	})
	time.Sleep(6 * time.Second) // let the sparklines draw a few seconds of traffic
	shot(t, tb, 1280, "overview.png")
	stop()
	sent.Wait()
	total := heaviest[0] + heaviest[1]
	s := tb.waitOverview("mobile-app-7 with every check of both instances", func(s overviewState) bool {
		return len(s.Checks) > 0 && s.Checks[0].Checks == strconv.FormatInt(total, 10)
	})
	if s.Checks[0].Key != "mobile-app-7" {
		t.Errorf("the first row %+v, want mobile-app-7", s.Checks[0])
	}
}

// steadyTraffic sends about 60 checks a second to base until ctx ends: a
// third to api's heaviest client, mobile-app-7, a few heavy ones beside it,
// the rest over 400 light keys, and a crawler and readers on the shadow
// policy. It returns how many checks of mobile-app-7 it sent.
func steadyTraffic(ctx context.Context, base string, seed uint64) int64 {
	r := rand.New(rand.NewPCG(seed, 7))
	heavy := []string{"mobile-app-7", "partner-acme", "10.0.4.17", "batch-export"}
	var n int64
	tick := time.NewTicker(16 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return n
		case <-tick.C:
		}
		policy, key := "api", ""
		switch x := r.IntN(100); {
		case x < 30:
			key = heavy[0]
			n++
		case x < 55:
			key = heavy[1+r.IntN(3)]
		case x < 85:
			key = fmt.Sprintf("user-%d", r.IntN(400))
		case x < 93:
			policy, key = "search", "crawler-9"
		default:
			policy, key = "search", fmt.Sprintf("reader-%d", r.IntN(100))
		}
		resp, err := http.Post(base+"/api/v1/check?policy="+policy+"&key="+key, "", nil)
		if err != nil {
			if key == heavy[0] {
				n--
			}
			continue
		}
		resp.Body.Close()
	}
}
