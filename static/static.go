// Package static holds the visualizer's front end: plain JavaScript modules
// and CSS, no build step, embedded in the binary so a single file serves
// everything.
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
)

// FS holds app.css, lab.css, overview.css, favicon.svg and js/ (ES modules, entry js/main.js) at its
// root; the server serves it under /static/ (the page links them as
// /static/<name>?v=<version>; modules import each other by relative URL).
//
//go:embed app.css lab.css overview.css favicon.svg js
var FS embed.FS

// ETag names this build's front end: a hash of every embedded file. Module
// imports carry no ?v=, so the server has browsers revalidate them against
// it rather than cache one release's modules beside another's.
var ETag = etag()

func etag() string {
	h := sha256.New()
	err := fs.WalkDir(FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(FS, path)
		if err != nil {
			return err
		}
		h.Write([]byte(path))
		h.Write([]byte{0})
		h.Write(b)
		return nil
	})
	if err != nil { // cannot happen: the files are in the binary
		panic("static: failed to hash the embedded files: " + err.Error())
	}
	return `"` + hex.EncodeToString(h.Sum(nil)[:12]) + `"`
}
