package server_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/static"
)

// TestEveryConsumerReadsTheAlgorithmTable enumerates limiter.Algorithms and
// fails when any consumer misses one: the live state (the window answer,
// which is the snapshot message without its type), the page's caption and
// the table it gives its script, the algorithm's own JS module, and the
// lab's lanes and decisions. Adding an algorithm to the limiter is all it
// takes for every one of them to show it.
func TestEveryConsumerReadsTheAlgorithmTable(t *testing.T) {
	algorithms := limiter.Algorithms()
	var specs []string
	for _, d := range algorithms {
		specs = append(specs, "t"+string(d.Name)+"=3/1h@"+string(d.Name))
	}
	app := startApp(t, map[string]string{"RATESCOPE_POLICIES": strings.Join(specs, ";")})
	key := newKey()

	lab := page(t, app.URL+"/lab?lab="+key)
	var labResults []string
	r := do(t, "POST", app.URL+"/api/v1/lab/check", `{"lab":"`+key+`","limit":3,"windowMs":10000}`)
	for _, res := range r.body["results"].([]any) {
		labResults = append(labResults, res.(map[string]any)["algorithm"].(string))
	}
	for i, d := range algorithms {
		name := string(d.Name)
		policy := "t" + name
		t.Run(name, func(t *testing.T) {
			if d.Title == "" || d.Caption == "" || d.Tradeoff == "" || d.MaxLimit < 1 {
				t.Errorf("descriptor %+v lacks a title, caption, tradeoff or limit", d)
			}
			// The live state: the rule carries the algorithm's own state under
			// its name, or the log its entries.
			do(t, "POST", app.URL+"/api/v1/check?key="+key+"&policy="+policy, "")
			w := do(t, "GET", app.URL+"/api/v1/window?"+url.Values{"key": {key}, "policy": {policy}}.Encode(), "")
			rule := w.body["rules"].([]any)[0].(map[string]any)
			if w.body["algorithm"] != name {
				t.Errorf("window algorithm %v, want %s", w.body["algorithm"], name)
			}
			if d.Entries {
				if len(w.body["entries"].([]any)) != 1 {
					t.Errorf("window entries %v, want the one check", w.body["entries"])
				}
			} else if st, ok := rule[name].(map[string]any); !ok || len(st) == 0 {
				t.Errorf("rule %v carries no %q state", rule, name)
			}
			// The page: the caption, and the table its script reads.
			doc := page(t, app.URL+"/?"+url.Values{"key": {key}, "policy": {policy}}.Encode())
			if c := strings.TrimSpace(doc.Find("#algo-caption").Text()); c != d.Caption {
				t.Errorf("caption %q, want %q", c, d.Caption)
			}
			var table []struct{ Name, Caption string }
			raw, _ := doc.Find("#app").Attr("data-algorithms")
			if err := json.Unmarshal([]byte(raw), &table); err != nil || len(table) != len(algorithms) || table[i].Name != name || table[i].Caption != d.Caption {
				t.Errorf("data-algorithms %s (%v) lacks %s at %d", raw, err, name, i)
			}
			// Its own module, served.
			if _, err := fs.Stat(static.FS, "js/algorithms/"+name+".js"); err != nil {
				t.Errorf("no module js/algorithms/%s.js: %v", name, err)
			}
			if status := get(t, app.URL+"/static/js/algorithms/"+name+".js"); status != http.StatusOK {
				t.Errorf("GET its module: %d", status)
			}
			// The lab: a lane, a caption, a decision.
			if lab.Find(`[data-testid="lab-lane-`+name+`"]`).Length() != 1 {
				t.Errorf("the lab has no lane for %s", name)
			}
			if c := strings.TrimSpace(lab.Find(`.lab-row-` + name + ` .lab-caption`).Text()); c != d.Tradeoff {
				t.Errorf("lab caption %q, want %q", c, d.Tradeoff)
			}
			if i >= len(labResults) || labResults[i] != name {
				t.Errorf("lab decisions %v, want %s at %d", labResults, name, i)
			}
		})
	}
}

func page(t *testing.T, u string) *goquery.Document {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	doc, err := goquery.NewDocumentFromReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func get(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestThePageShowsTheScriptsSteps: "What one check does" lists the steps
// the log's check script declares (limiter's Descriptor.Steps, read from
// the script and held to it by the limiter's tests), each with its
// commands, in order — not a copy that can outlive the script.
func TestThePageShowsTheScriptsSteps(t *testing.T) {
	d, _ := limiter.Describe(limiter.Log)
	app := startApp(t, nil)
	doc := page(t, app.URL+"/?key=demo&policy=demo")
	items := doc.Find(`[data-testid="check-steps"] li`)
	if items.Length() != len(d.Steps) || len(d.Steps) == 0 {
		t.Fatalf("the page lists %d steps, the script %d", items.Length(), len(d.Steps))
	}
	items.Each(func(i int, li *goquery.Selection) {
		var cmds []string
		li.Find("code").Each(func(_ int, c *goquery.Selection) { cmds = append(cmds, c.Text()) })
		text := strings.Join(strings.Fields(li.Text()), " ")
		want := strings.Join(strings.Fields(strings.Join(append(slices.Clone(d.Steps[i].Commands), d.Steps[i].Text), " ")), " ")
		if !slices.Equal(cmds, d.Steps[i].Commands) || text != want {
			t.Errorf("step %d: %v %q, want %v %q", i+1, cmds, text, d.Steps[i].Commands, want)
		}
	})
}
