package bus

// The stream's message types (SPEC §4): the "type" member of every message a
// viewer reads, declared here once because every side that builds one needs
// them — the live view (server/live), the overview (server/overview) and a Go
// service's livebus.Publisher — and this is the lowest package they all
// share. An event's envelope carries its message's type as its Kind. The
// page's copy, MSG in static/js/messages.js, is checked against this block by
// a test.
const (
	TypeHello    = "hello"
	TypeStatus   = "status"
	TypeTick     = "tick"
	TypeSnapshot = "snapshot"
	TypeDecision = "decision"
	TypeReset    = "reset"
	TypeRace     = "race"
	// TypeAdjustment is a refund or a settle of one check's entries (its
	// kind says which), from any instance.
	TypeAdjustment = "adjustment"
	TypeViewers    = "viewers"
	// TypeOverride tells a window's viewers that the per-client override in
	// force for it changed: the rules in force now, and the override.
	TypeOverride = "override"
	TypeLab      = "lab"      // one lab request under every algorithm (SPEC §8)
	TypeLabReset = "labReset" // a lab's windows were emptied
	// TypeLabSnapshot carries a lab's recent requests to a viewer that joins.
	TypeLabSnapshot = "labSnapshot"
	// TypeOverview is every policy's rates and one policy's top clients, on
	// /ws/overview once a second (SPEC §11).
	TypeOverview = "overview"
	// TypeLease is one lease of an inflight policy acquired, refused,
	// renewed, released or found expired (its kind says which), from any
	// instance: what the page draws leases from.
	TypeLease = "lease"
)
