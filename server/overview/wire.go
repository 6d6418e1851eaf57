package overview

import (
	"encoding/json"

	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/internal/redisdb"
)

// Instances merge their counts over classic Redis Pub/Sub, on a channel of
// their own (so viewers' events and these summaries never slow each other's
// readers): "ratescope:overview:db<N>". An instance with someone watching
// its overview (a viewer, or an API call a moment ago) says so every
// second in a want naming the policies whose top lists it shows; every
// instance that heard a want within wantTTL publishes its summary every
// second, and at once on a new want. Nobody watching: nothing is sent.
const (
	kindWant    = "want"
	kindSummary = "summary"
)

// channel is the overview's channel on rdb's database.
func channel(rdb bus.Client) string { return redisdb.Channel("ratescope:overview", rdb) }

// envelope is one overview message between instances.
type envelope struct {
	Origin  string       `json:"o"`
	Kind    string       `json:"k"`
	Want    []string     `json:"w,omitempty"` // want: the policies whose top lists are shown
	Summary *wireSummary `json:"s,omitempty"` // summary
}

// wireSummary is one instance's counts: every policy's rates, and the top
// lists of the policies wanted.
type wireSummary struct {
	// End is the last second (Unix) of every rates series: the second in
	// progress when the summary was made.
	End   int64                `json:"end"`
	Rates map[string]wireRates `json:"rates,omitempty"` // policies with traffic in the last minute
	Top   map[string]wireTop   `json:"top,omitempty"`
}

// wireRates are a policy's decisions per second, oldest first, ending at End.
// (Series with short names: a conversion apart).
type wireRates struct {
	Allowed      []int64 `json:"a"`
	Denied       []int64 `json:"d"`
	ShadowDenied []int64 `json:"s"`
	Cached       []int64 `json:"c"`
}

// wireTop is an instance's minute of a policy (minute.wire).
type wireTop struct {
	Total       int64     `json:"n"`
	Denied      int64     `json:"nd"`
	Floor       int64     `json:"f,omitempty"`  // the estimate of a key not in Checks
	DeniedFloor int64     `json:"fd,omitempty"` // the estimate of a key not in Denials
	Checks      []wireRow `json:"c"`
	Denials     []wireRow `json:"d"`
}

type wireRow struct {
	Key    string `json:"k"`
	Checks int64  `json:"c,omitempty"`
	Denied int64  `json:"d,omitempty"`
}

func (e envelope) encode() []byte {
	b, err := json.Marshal(e)
	if err != nil {
		panic("overview: failed to encode: " + err.Error()) // plain types: cannot happen
	}
	return b
}
