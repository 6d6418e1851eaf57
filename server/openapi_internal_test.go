package server

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/ratescope/ratescope/limiter"
)

// TestOpenAPIAlgorithmsAreTheLimiters: the document names exactly the
// limiter's algorithms, and every one that keeps a state has a schema for it,
// with no list of them written in openapi.json.
func TestOpenAPIAlgorithmsAreTheLimiters(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Algorithm struct {
					Enum []string `json:"enum"`
				} `json:"Algorithm"`
				RuleState struct {
					Properties map[string]json.RawMessage `json:"properties"`
				} `json:"RuleState"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, a := range limiter.Algorithms() {
		want = append(want, string(a.Name))
		if _, ok := doc.Components.Schemas.RuleState.Properties[string(a.Name)]; !ok && !a.Entries {
			t.Errorf("RuleState has no schema for %s's state", a.Name)
		}
	}
	if !slices.Equal(doc.Components.Schemas.Algorithm.Enum, want) {
		t.Fatalf("the document's algorithms are %v, the limiter's %v", doc.Components.Schemas.Algorithm.Enum, want)
	}
	// A sixth algorithm is described without editing the document.
	extra := append(limiter.Algorithms(), limiter.Descriptor{Name: "sixth", Title: "Sixth"})
	var grown map[string]any
	if err := json.Unmarshal(openAPIDocument(openAPISource, extra), &grown); err != nil {
		t.Fatal(err)
	}
	schemas := grown["components"].(map[string]any)["schemas"].(map[string]any)
	if enum := schemas["Algorithm"].(map[string]any)["enum"].([]any); enum[len(enum)-1] != "sixth" {
		t.Fatalf("a sixth algorithm is not in the list: %v", enum)
	}
	if _, ok := schemas["RuleState"].(map[string]any)["properties"].(map[string]any)["sixth"]; !ok {
		t.Fatal("a sixth algorithm's state has no schema")
	}
	results := schemas["LabAnswer"].(map[string]any)["properties"].(map[string]any)["results"].(map[string]any)
	if results["maxItems"] != float64(len(extra)) || results["minItems"] != float64(len(extra)) {
		t.Fatalf("a lab answer of %d algorithms is held to %v–%v results", len(extra), results["minItems"], results["maxItems"])
	}
}
