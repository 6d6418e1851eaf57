package server

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
)

// openAPISource is the OpenAPI 3.1 document of the HTTP API: the one
// description of every route, its parameters and its answers, which the tests
// validate real responses against. What it says of the algorithms comes from
// the limiter's own list (openAPIDocument), so an algorithm added there is
// described without editing it.
//
//go:embed openapi.json
var openAPISource []byte

// openAPI is the document served: openAPISource with the algorithms filled in.
var openAPI = openAPIDocument(openAPISource, limiter.Algorithms())

// openAPIDocument fills in the algorithms: the Algorithm schema's names, a
// lab answer's count of results, and an object in RuleState for the state of each algorithm that keeps one but
// has no schema of its own in the document.
func openAPIDocument(src []byte, algorithms []limiter.Descriptor) []byte {
	var doc map[string]any
	if err := json.Unmarshal(src, &doc); err != nil {
		panic(fmt.Sprintf("openapi.json: %v", err))
	}
	schemas := object(object(doc, "components"), "schemas")
	names := make([]any, len(algorithms))
	for i, a := range algorithms {
		names[i] = string(a.Name)
	}
	object(schemas, "Algorithm")["enum"] = names
	results := object(object(object(schemas, "LabAnswer"), "properties"), "results")
	results["minItems"], results["maxItems"] = len(algorithms), len(algorithms) // a lab answers for each
	states := object(object(schemas, "RuleState"), "properties")
	for _, a := range algorithms {
		if _, ok := states[string(a.Name)]; !ok && !a.Entries {
			states[string(a.Name)] = map[string]any{
				"type":        "object",
				"description": a.Title + ": its own state of the rule.",
			}
		}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("openapi.json: %v", err))
	}
	return out
}

// object is doc[key] as an object; the embedded document has it.
func object(doc map[string]any, key string) map[string]any {
	m, ok := doc[key].(map[string]any)
	if !ok {
		panic(fmt.Sprintf("openapi.json: %q is not an object", key))
	}
	return m
}

// handleOpenAPI serves the document.
func handleOpenAPI() echo.HandlerFunc {
	return func(c echo.Context) error {
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPI)
	}
}
