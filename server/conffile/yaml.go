package conffile

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrExcessiveAliasing is returned for a file whose aliases would expand it
// past what envoyproxy/ratelimit's YAML library accepts.
var ErrExcessiveAliasing = errors.New("document contains excessive aliasing")

// Decode parses data's first YAML document into a node tree and refuses it
// when following its aliases (*name, and merge keys <<: *name) would
// expand it excessively. Parsing into a node keeps each alias as one node,
// so the tree is as large as the text; it is code that follows every alias
// of the tree that would multiply it — seven levels of ten aliases make a
// file of under 1 KB into ten million nodes. The expansion is measured
// before any alias is followed, in time linear in the file.
//
// The bound is that of the YAML libraries envoyproxy/ratelimit and
// ratescope decode with (gopkg.in/yaml.v2, go.yaml.in/yaml/v3), applied to
// the whole file: nodes reached through aliases may make up at most 99% of
// the expanded file while it has up to 400,000 nodes, a share that falls
// linearly to 10% at 4,000,000 nodes and stays there. A small file may
// thus expand about 100-fold; a large one by a tenth at most.
func Decode(data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("failed to read the YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := checkAliases(&doc); err != nil {
		return nil, fmt.Errorf("failed to read the YAML: %w", err)
	}
	return &doc, nil
}

// Thresholds of the aliasing bound (Decode), as the YAML libraries set them.
const (
	aliasRatioLow  = 400_000   // nodes in all up to which 99% may come from aliases
	aliasRatioHigh = 4_000_000 // nodes in all from which 10% may
	// expandedMax saturates the count: far past any bound, so a count
	// that reaches it is refused, and it cannot overflow.
	expandedMax = 1 << 40
)

// allowedAliasRatio is the share of an expanded file's nodes that may come
// from aliases, for a file of decoded nodes in all.
func allowedAliasRatio(decoded int64) float64 {
	switch {
	case decoded <= aliasRatioLow:
		return 0.99
	case decoded >= aliasRatioHigh:
		return 0.10
	}
	return 0.99 - 0.89*float64(decoded-aliasRatioLow)/float64(aliasRatioHigh-aliasRatioLow)
}

// checkAliases refuses a tree whose aliases, followed, would expand it past
// the bound, or that holds an alias to a node containing it (a cycle, which
// followed never ends). It counts as the YAML libraries count their decoding
// steps: each node once as written, and again each time an alias leads to
// it.
func checkAliases(doc *yaml.Node) error {
	c := aliasCounter{expanded: map[*yaml.Node]int64{}, open: map[*yaml.Node]bool{}}
	total := c.size(doc)
	if c.err != nil {
		return c.err
	}
	viaAliases := total - c.written
	if viaAliases > 100 && total > 1000 && float64(viaAliases)/float64(total) > allowedAliasRatio(total) {
		return fmt.Errorf("%w: its %d nodes would expand to %d through aliases", ErrExcessiveAliasing, c.written, total)
	}
	return nil
}

// aliasCounter measures a tree. Only an anchored node can be reached
// again, through an alias, so only anchored nodes have their expanded size
// kept (computed once, so a node aliased a million times costs one walk) and
// only they can close a cycle.
type aliasCounter struct {
	expanded map[*yaml.Node]int64 // the anchored nodes measured
	open     map[*yaml.Node]bool  // the anchored nodes being measured
	written  int64                // nodes as written, each alias one node
	err      error
}

// size is n's expanded size: itself and everything under it, aliases
// followed. An alias is one node of its own, then its anchor's nodes again.
// Anchors come before their aliases in a file, so each written node is met
// first as written.
func (c *aliasCounter) size(n *yaml.Node) int64 {
	if n == nil || c.err != nil {
		return 0
	}
	anchored := n.Anchor != ""
	if anchored {
		if s, ok := c.expanded[n]; ok {
			return s
		}
		c.open[n] = true
	}
	c.written++
	s := int64(1)
	if n.Kind == yaml.AliasNode {
		if c.open[n.Alias] {
			c.err = fmt.Errorf("the alias *%s on line %d refers to a node that contains it", n.Value, n.Line)
			return 0
		}
		s += c.size(n.Alias)
	}
	for _, child := range n.Content {
		s = min(s+c.size(child), expandedMax)
	}
	if anchored {
		delete(c.open, n)
		c.expanded[n] = s
	}
	return s
}
