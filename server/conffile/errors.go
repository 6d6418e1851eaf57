package conffile

import (
	"errors"
	"fmt"
)

// MaxListed is how many of a file's problems an error lists: a file of a
// million bad lines is refused with a log line of readable length, not a
// million lines.
const MaxListed = 20

// Problems collects problems, keeping the first MaxListed and counting the
// rest, so a file of many need not cost a formatted message each.
type Problems struct {
	list []error
	more int
}

// Full reports whether another problem would only be counted: a caller
// can skip formatting it and call Count instead.
func (p *Problems) Full() bool { return len(p.list) >= MaxListed }

// Add records err.
func (p *Problems) Add(err error) {
	if p.Full() {
		p.more++
		return
	}
	p.list = append(p.list, err)
}

// Count records a problem without its message (when Full).
func (p *Problems) Count() { p.more++ }

// Len is how many problems were recorded.
func (p *Problems) Len() int { return len(p.list) + p.more }

// Merge adds o's problems to p's.
func (p *Problems) Merge(o *Problems) {
	for _, err := range o.list {
		p.Add(err)
	}
	p.more += o.more
}

// Err is nil without problems; otherwise the problems listed, one a line,
// ending with how many more there were.
func (p *Problems) Err() error {
	if p.more == 0 {
		return errors.Join(p.list...)
	}
	return errors.Join(append(p.list[:len(p.list):len(p.list)], fmt.Errorf("… and %d more problems", p.more))...)
}

// Join is errors.Join of errs, listing at most MaxListed of them.
func Join(errs []error) error {
	var p Problems
	for _, err := range errs {
		p.Add(err)
	}
	return p.Err()
}
