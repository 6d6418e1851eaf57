// Package static holds the visualizer's front end: plain JavaScript and CSS,
// no build step, embedded in the binary so a single file serves everything.
package static

import "embed"

// FS holds app.js, app.css and favicon.svg at its root; the server serves it
// under /static/ (the page links them as /static/<name>?v=<version>).
//
//go:embed app.js app.css favicon.svg
var FS embed.FS
