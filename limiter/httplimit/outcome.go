package httplimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/ratescope/ratescope/limiter"
)

// CountOnly makes a request count only when counts is true for the status
// its handler answered with: a login limit that counts failed logins, not
// logins. The request is still checked before the handler, so it holds its
// room while the handler runs and no number of concurrent requests gets more
// than the limit to the handler ("peek, then record on failure" would let
// them all through); after the handler, a request whose status does not
// count is refunded (Checker.Refund): its entries leave the log as if it
// had never been checked.
//
// The status is the handler's first final one: 200 when it wrote only a
// body, or nothing; 101 when it hijacked the connection. A handler that
// panics answered the status it wrote, or 500 when it wrote none; the
// refund runs as the panic passes through, and the panic goes on unchanged.
// A request that recorded nothing has nothing to refund: a shadow policy's
// would-deny, a check that failed open.
//
// The refund runs before the response is complete, within the check
// timeout, and a client that hangs up does not cancel it. When it fails
// (Redis down) the response is not touched and the entries count until they
// slide out; observers implementing RefundObserver (Hooks.Refund) hear of it.
//
// Only a log policy keeps each check's entries, under its id: Limit panics
// for a policy of another algorithm, or for a Checker whose Limiter is no
// Refunder — a mistake found when the routes are built, never one that
// quietly counts every request. CountOnly(nil) counts every request again
// (the default), e.g. for one route of a Middleware that counts outcomes.
// Check, for handlers that answer themselves, is not affected: such a
// handler refunds with Checker.Refund or limiter.Limiter.Refund.
func CountOnly(counts func(status int) bool) Option {
	return func(c *config) { c.counts = counts }
}

// CountStatus is CountOnly for a list of statuses: CountStatus(401, 403)
// counts only refused logins.
func CountStatus(statuses ...int) Option {
	statuses = slices.Clone(statuses)
	return CountOnly(func(status int) bool { return slices.Contains(statuses, status) })
}

// Refunder takes back what one check recorded, as *limiter.Limiter does.
type Refunder interface {
	Refund(ctx context.Context, key string, p limiter.Policy, id string) (limiter.Adjustment, error)
}

// RefundObserver is an Observer that also hears of every refund a Checker
// makes (CountOnly's among them), e.g. to count the ones that failed.
type RefundObserver interface {
	// Refunded is called after each refund of the check t answered with
	// a.ID: err is nil when Redis ran it (a.Was entries taken back, 0 when
	// none was left), else the entries stay. a names the key, policy and
	// id either way.
	Refunded(t Target, a limiter.Adjustment, took time.Duration, err error)
}

// Refunded calls h.Refund.
func (h Hooks) Refunded(_ Target, a limiter.Adjustment, _ time.Duration, err error) {
	if h.Refund != nil {
		h.Refund(a, err)
	}
}

// Refund takes back every entry the check of t that answered id recorded
// (limiter.Limiter.Refund): idempotent, bounded like a check by the
// Timeout (and MaxWait), and told to the observers that implement
// RefundObserver — the Checker's, then the policy's.
func (c *Checker) Refund(ctx context.Context, t Target, id string) (limiter.Adjustment, error) {
	start := time.Now()
	a, err := c.refund(ctx, t, id)
	took := time.Since(start)
	if err != nil {
		a = limiter.Adjustment{Key: t.Key, Policy: t.Policy.Name, ID: id}
	}
	for _, os := range [2][]Observer{c.Observers, t.Policy.observers} {
		for _, o := range os {
			if ro, ok := o.(RefundObserver); ok {
				ro.Refunded(t, a, took, err)
			}
		}
	}
	return a, err
}

func (c *Checker) refund(ctx context.Context, t Target, id string) (limiter.Adjustment, error) {
	r, ok := c.Limiter.(Refunder)
	if !ok {
		return limiter.Adjustment{}, fmt.Errorf("failed to refund: %T takes nothing back (no Refund method)", c.Limiter)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, max(c.MaxWait, timeout))
	defer cancel()
	return r.Refund(ctx, t.Key, t.Policy.Policy, id)
}

// mustRefund panics unless CountOnly can refund checks of p through c: the
// routes are being built, and a limit that would silently count every
// request must not start.
func mustRefund(c *Checker, p limiter.Policy) {
	if alg := p.AlgorithmName(); alg != limiter.Log {
		panic(fmt.Sprintf("httplimit: CountOnly on policy %q of algorithm %s: %v", p.Name, alg, limiter.ErrNotLog))
	}
	if _, ok := c.Limiter.(Refunder); !ok {
		panic(fmt.Sprintf("httplimit: CountOnly on policy %q: the Checker's Limiter %T cannot refund (no Refund method)", p.Name, c.Limiter))
	}
}

// serveCounted runs next for a request whose check recorded id, and
// refunds the check when the status next answered does not count — also
// when next panics, without stopping the panic.
func (c *config) serveCounted(next http.Handler, w http.ResponseWriter, r *http.Request, t Target, id string) {
	sw := &statusWriter{ResponseWriter: w}
	returned := false
	defer func() {
		status := sw.status
		switch {
		case status != 0:
		case returned:
			status = http.StatusOK
		default: // panicking: net/http, or a recovering middleware, answers 500
			status = http.StatusInternalServerError
		}
		if !c.counts(status) {
			// The check's outcome is known and the response written: a
			// client hanging up now must not keep its entries counted.
			_, _ = c.checker.Refund(context.WithoutCancel(r.Context()), t, id)
		}
	}()
	next.ServeHTTP(sw, r)
	returned = true
}

// statusWriter remembers the status a handler answers with. Flush, Hijack
// and ReadFrom pass through exactly when the writer underneath supports
// them (through http.ResponseController: an unsupported one reports
// http.ErrNotSupported); Unwrap gives http.ResponseController the rest.
type statusWriter struct {
	http.ResponseWriter
	status int // the first final status; 0 until one is written
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx statuses other than 101 are informational: the final one follows.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom keeps net/http's sendfile path for io.Copy to the response.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, src)
}

// writerOnly hides every method but Write, so io.Copy does not come back to
// ReadFrom.
type writerOnly struct{ io.Writer }

func (w *statusWriter) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController's Flush calls.
func (w *statusWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if w.status == 0 && !errors.Is(err, http.ErrNotSupported) {
		w.status = http.StatusOK // flushing sends the headers
	}
	return err
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return conn, rw, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
