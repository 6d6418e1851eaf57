package overview

// summary is a Space-Saving summary (Metwally, Agrawal and El Abbadi, 2005):
// the heaviest keys of a stream in k counters, whatever the number of
// distinct keys. A key already counted adds to its counter; a new key takes
// a free counter, or else the smallest one, inheriting its count. So every
// count is an overestimate by at most the smallest count when it was taken
// (at most n/k after n additions), and every key added more than n/k times
// holds a counter.
//
// The counters sit in a fixed array and never move; a min-heap of their
// indexes finds the smallest, and a map finds a key's counter. Once k
// distinct keys have been seen an addition allocates nothing: a replaced
// key's map entry is deleted and the new key's added.
type summary struct {
	k        int
	total    int64            // everything added
	index    map[string]int32 // key → its counter
	counters []counter
	heap     []int32 // counter indexes, smallest count first
	pos      []int32 // counter index → its place in heap
}

// counter is one key's count; tally is a second figure counted alongside
// while the key holds the counter (how many of its checks were denied).
type counter struct {
	key   string
	count int64
	tally int64
}

func newSummary(k int) *summary {
	return &summary{k: k, index: make(map[string]int32)}
}

// add counts one more of key, and one more of its tally when tallied.
func (s *summary) add(key string, tallied bool) {
	s.total++
	var t int64
	if tallied {
		t = 1
	}
	if i, ok := s.index[key]; ok {
		c := &s.counters[i]
		c.count++
		c.tally += t
		s.down(s.pos[i])
		return
	}
	if len(s.counters) < s.k {
		i := int32(len(s.counters))
		s.counters = append(s.counters, counter{key: key, count: 1, tally: t})
		s.heap = append(s.heap, i)
		s.pos = append(s.pos, int32(len(s.heap)-1))
		s.index[key] = i
		s.up(int32(len(s.heap) - 1))
		return
	}
	i := s.heap[0] // the smallest: its key gives way
	c := &s.counters[i]
	delete(s.index, c.key)
	*c = counter{key: key, count: c.count + 1, tally: t}
	s.index[key] = i
	s.down(0)
}

// reset empties s for reuse, keeping its memory.
func (s *summary) reset() {
	clear(s.index)
	clear(s.counters) // let the keys go
	s.counters, s.heap, s.pos = s.counters[:0], s.heap[:0], s.pos[:0]
	s.total = 0
}

// floor is the most a key s does not hold may have been added: the
// smallest count once every counter is in use, else 0.
func (s *summary) floor() int64 {
	if len(s.counters) < s.k {
		return 0
	}
	return s.counters[s.heap[0]].count
}

// len is how many counters are in use.
func (s *summary) len() int { return len(s.counters) }

func (s *summary) less(a, b int32) bool {
	return s.counters[s.heap[a]].count < s.counters[s.heap[b]].count
}

func (s *summary) swap(a, b int32) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.pos[s.heap[a]] = a
	s.pos[s.heap[b]] = b
}

func (s *summary) up(j int32) {
	for j > 0 {
		parent := (j - 1) / 2
		if !s.less(j, parent) {
			return
		}
		s.swap(j, parent)
		j = parent
	}
}

func (s *summary) down(j int32) {
	n := int32(len(s.heap))
	for {
		l := 2*j + 1
		if l >= n {
			return
		}
		small := l
		if r := l + 1; r < n && s.less(r, l) {
			small = r
		}
		if !s.less(small, j) {
			return
		}
		s.swap(j, small)
		j = small
	}
}
