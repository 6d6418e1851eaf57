package server

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter/httplimit"
)

// problem is an RFC 9457 problem document (the one type httplimit writes
// too). Handlers return it as an error; the one error handler writes it.
type problem struct {
	httplimit.Problem
	header http.Header // extra response headers, e.g. Retry-After
}

func (p *problem) Error() string { return p.Title + ": " + p.Detail }

func newProblem(status int, detail string) *problem {
	return &problem{Problem: httplimit.NewProblem(status, detail)}
}

// badRequest is the 400 for invalid fields.
func badRequest(errs []httplimit.FieldError) *problem {
	p := newProblem(http.StatusBadRequest, "the request has invalid parameters; see errors")
	if len(errs) == 1 {
		p.Detail = errs[0].Field + ": " + errs[0].Detail
	}
	p.Errors = errs
	return p
}

func (p *problem) withHeader(k, v string) *problem {
	if p.header == nil {
		p.header = http.Header{}
	}
	p.header.Set(k, v)
	return p
}

// unavailable is the 503 for Redis failures: try again in a second.
func unavailable(detail string) *problem {
	return newProblem(http.StatusServiceUnavailable, detail).withHeader("Retry-After", "1")
}

// writeProblem writes any problem-shaped document with its status.
func writeProblem(c echo.Context, status int, doc any, header http.Header) error {
	for k, vs := range header {
		for _, v := range vs {
			c.Response().Header().Add(k, v)
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return c.Blob(status, httplimit.ProblemContentType, b)
}

// errorHandler turns every error a handler or Echo returns into a problem
// document; nothing else writes errors.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		var p *problem
		var he *echo.HTTPError
		switch {
		case errors.As(err, &p):
		case errors.As(err, &he):
			p = newProblem(he.Code, http.StatusText(he.Code))
			if msg, ok := he.Message.(string); ok && msg != "" {
				p.Detail = msg
			}
			if he.Code == http.StatusMethodNotAllowed {
				p.Detail = "method " + c.Request().Method + " is not allowed here"
			}
		default:
			log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
			p = newProblem(http.StatusInternalServerError, "an unexpected error occurred")
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(p.Status)
			return
		}
		if err := writeProblem(c, p.Status, p, p.header); err != nil {
			log.Error("failed to write problem", "err", err)
		}
	}
}
