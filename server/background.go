package server

import "context"

// background runs the parts of the server that live as long as it does —
// loading the scripts, following resets, probing readiness, watching the
// config, counting the overview — each in its own goroutine until stop,
// which cancels it and waits for it to return. Parts stop in the reverse
// order they started.
type background struct {
	stops []func()
}

// run starts f with a context of parent's that stop cancels.
func (b *background) run(parent context.Context, f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	b.stops = append(b.stops, func() { cancel(); <-done })
}

// stop stops every part started, the last first, and waits for each.
func (b *background) stop() {
	for i := len(b.stops) - 1; i >= 0; i-- {
		b.stops[i]()
	}
	b.stops = nil
}
