// Package livebus lets a Go service show its rate-limit decisions live on a
// ratescope page: a Publisher sends the decisions of a service on the same
// Redis to ratescope's live view, for the windows someone watches — and at
// the cost of a map lookup for the others. It speaks the protocol ratescope
// instances speak to each other over Redis Pub/Sub.
//
//	pub := livebus.NewPublisher(rdb, "checkout-1")
//	go pub.Run(ctx)
//	defer pub.Close()
//	mw := httplimit.New(lim, httplimit.WithLiveView(pub))
package livebus
