package readiness

import (
	"context"
	"log/slog"
	"time"
)

// outage is what the outage log remembers between probes: when the outage
// began (zero: Redis is up), how many checks failed in it, and when its last
// line was logged. However many checks fail, an outage logs one line when it
// starts, one at most every SummaryInterval while it lasts and one when it
// ends.
type outage struct {
	start    time.Time
	failed   int64
	lastLine time.Time
}

// logLine is one line to log once the Monitor's lock is released; a zero
// logLine logs nothing.
type logLine struct {
	level slog.Level
	msg   string
	attrs []slog.Attr
}

func (l logLine) log(log *slog.Logger) {
	if l.msg != "" {
		log.LogAttrs(context.Background(), l.level, l.msg, l.attrs...)
	}
}

// observe takes one probe's verdict (err nil: Redis is up) and the checks
// that failed since the previous one, and returns the line to log, if any.
func (o *outage) observe(err error, failed int64, now time.Time) logLine {
	if err == nil {
		if o.start.IsZero() {
			return logLine{}
		}
		line := logLine{slog.LevelInfo, "redis outage ended", []slog.Attr{
			slog.Duration("duration", now.Sub(o.start).Round(time.Millisecond)),
			slog.Int64("failed_checks", o.failed+failed),
		}}
		*o = outage{}
		return line
	}
	if o.start.IsZero() {
		*o = outage{start: now, failed: failed, lastLine: now}
		return logLine{slog.LevelWarn, "redis outage started", []slog.Attr{
			slog.String("redis", Word(err)),
			slog.String("err", err.Error()),
		}}
	}
	o.failed += failed
	if now.Sub(o.lastLine) < SummaryInterval {
		return logLine{}
	}
	o.lastLine = now
	return logLine{slog.LevelWarn, "redis outage continues", []slog.Attr{
		slog.String("redis", Word(err)),
		slog.Duration("duration", now.Sub(o.start).Round(time.Millisecond)),
		slog.Int64("failed_checks", o.failed),
		slog.String("err", err.Error()),
	}}
}
