package static_test

import (
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ratescope/ratescope/static"
)

// The front end is served from the binary: the page's entry module is in FS,
// and ETag (a quoted hash of every file) names this build's version of it.
func Example() {
	entry, err := fs.ReadFile(static.FS, "js/main.js")
	fmt.Println(err == nil && len(entry) > 0, strings.HasPrefix(static.ETag, `"`))

	srv := httptest.NewServer(http.FileServerFS(static.FS))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/app.css")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
	// Output:
	// true true
	// 200 text/css; charset=utf-8
}
