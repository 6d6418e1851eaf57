package limiter

import "time"

// WithCalendar, for tests, sets the clock quota periods are computed
// around: now (nil: the machine's) stands for the server's clock, and shift
// is added to Redis's to get the calendar's — a test shifts the calendar so
// a period ends seconds from now, on Redis's clock, instead of waiting for
// a midnight.
func WithCalendar(now func() time.Time, shift time.Duration) Option {
	return func(l *Limiter) { l.cal = calendar{now: now, shift: shift} }
}

// QuotaKey, for tests, names the counter of key's quota of period pd under
// p for the period starting at startMs, as the scripts are given it.
func QuotaKey(key string, p Policy, pd Period, startMs int64) string {
	return quotaKey(key, p, pd, startMs)
}

// ManySource, for tests, is a script's many variant: several calls of it in
// one (see many.go).
var ManySource = manySource

// ManyArgs, for tests, lays out calls — each its keys and arguments — for a
// many variant, as the batcher sends them.
func ManyArgs(keys [][]string, args [][]any) ([]string, []any) {
	calls := make([]*call, len(keys))
	for i := range keys {
		calls[i] = &call{keys: keys[i], args: args[i]}
	}
	return manyArgs(calls)
}
