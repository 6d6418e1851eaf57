package envoyconf

import (
	"strconv"
	"strings"
)

// at is where a field is, as a chain up to the file's top level (nil). The
// path a problem names (descriptors[0].rate_limit.unit) is spelled out only
// for a problem, so a deep tree costs no path per field.
type at struct {
	up    *at
	name  string // a member's name
	item  bool   // a list's item, not a member
	index int    // the item's index in its list
}

// field is the top-level member named name.
func field(name string) *at { return &at{name: name} }

// member is a's member named name.
func (a *at) member(name string) *at { return &at{up: a, name: name} }

// elem is a's item i.
func (a *at) elem(i int) *at { return &at{up: a, item: true, index: i} }

// String spells the path out: descriptors[0].rate_limit.unit.
func (a *at) String() string {
	var parts []*at
	for ; a != nil; a = a.up {
		parts = append(parts, a)
	}
	var b strings.Builder
	for i := len(parts) - 1; i >= 0; i-- {
		switch a := parts[i]; {
		case a.item:
			b.WriteString("[" + strconv.Itoa(a.index) + "]")
		case b.Len() > 0:
			b.WriteString("." + a.name)
		default:
			b.WriteString(a.name)
		}
	}
	return b.String()
}
