package limiter

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Several decisions in one script call. Most of what a decision costs Redis
// is per call — reading the command, finding the script, setting up KEYS and
// ARGV, the reply, TIME — not the few sorted-set commands that decide. A
// batch's calls of one script whose keys may share a call (every key on a
// single Redis; on a cluster, one hash tag) go as one call of its many
// variant: the script's body as a function, run once per call in queue
// order, each in its own protected call, so one call's error (a key of the
// wrong type) is its own and the others are decided.
//
// Exactness is the script's: Redis runs the whole call atomically, and each
// decision sees every one before it, as separate calls in the same order
// would. They share one reading of Redis's clock, as calls within the same
// millisecond already may.

// manyPrelude and manyLoop wrap a script's body. The body reads the clock
// through clock(), which reads TIME once per call of the many variant.
//
// Converting between numbers and strings is much of what a decision costs
// Redis: Lua's tonumber parses a string twice with strtod, and a number
// becomes a string through sprintf. Within one many call most of those
// conversions repeat — the calls share their rules' arguments and the
// clock, so their cutoffs and scores too — so the body's tonumber (in base
// 10) and tostring remember what they converted for the rest of the call. The
// clock is read as numbers once, and every call's KEYS and ARGV are the
// same two tables, changed where the calls differ (no script writes to
// them).
//
// KEYS are every call's keys, in order. ARGV[1] is n, the calls, and ARGV[2]
// how their arguments are laid out:
//   - "same": every call has nk keys and na arguments, which differ only at
//     the nv positions listed (most batches: one policy, where only the
//     entry's id differs): nk, na, nv, the positions, the first call's na
//     arguments, then each call's nv arguments at those positions;
//   - "each": per call its number of keys and of arguments, then every
//     call's arguments, in order.
//
// It returns one reply per call: its array, or its error.
const (
	manyPrelude = `-- many: the calls of one script in one run (limiter/many.go)
local rawTonumber, rawTostring = tonumber, tostring
local numberOf, stringOf = {}, {}
local function tonumber(v, base)
  if base then return rawTonumber(v, base) end
  local n = numberOf[v]
  if n == nil then
    n = rawTonumber(v)
    if n ~= nil and n == n and type(v) == 'string' then numberOf[v] = n end
  end
  return n
end
local function tostring(v)
  local s = stringOf[v]
  if s == nil then
    s = rawTostring(v)
    if type(v) == 'number' and v == v then stringOf[v] = s end
  end
  return s
end
local clockRead
local function clock()
  if not clockRead then
    local t = redis.call('TIME')
    clockRead = {rawTonumber(t[1]), rawTonumber(t[2])}
  end
  return clockRead
end
local function decideOne(KEYS, ARGV)
`
	manyLoop = `
end
local function run(keys, args)
  local ok, r = pcall(decideOne, keys, args)
  if ok or (type(r) == 'table' and r.err) then return r end
  return {err = tostring(r)}
end
local n = tonumber(ARGV[1])
local replies = {}
if ARGV[2] == 'each' then
  local k, a = 0, 2 + 2 * n
  for i = 1, n do
    local nk, na = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
    local keys, args = {}, {}
    for j = 1, nk do keys[j] = KEYS[k + j] end
    for j = 1, na do args[j] = ARGV[a + j] end
    k, a = k + nk, a + na
    replies[i] = run(keys, args)
  end
else
  local nk, na, nv = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local at = {}
  for j = 1, nv do at[j] = tonumber(ARGV[5 + j]) end
  local base = 5 + nv -- the first call's arguments follow
  local a = base + na -- then each call's differing ones
  local keys, args = {}, {}
  for j = 1, na do args[j] = ARGV[base + j] end
  for i = 1, n do
    for j = 1, nk do keys[j] = KEYS[(i - 1) * nk + j] end
    for j = 1, nv do args[at[j]] = ARGV[a + j] end
    a = a + nv
    replies[i] = run(keys, args)
  end
end
return replies
`
)

// manySource is src as a many variant (see manyPrelude).
func manySource(src string) string {
	const readClock = "redis.call('TIME')"
	if strings.Count(src, readClock) > 1 {
		panic("limiter: a script reads the clock more than once")
	}
	return manyPrelude + strings.Replace(src, readClock, "clock()", 1) + manyLoop
}

// manyOf is each script's many variant.
var manyOf = map[*redis.Script]*redis.Script{}

// manyArgs lays out calls for their script's many variant (see manyPrelude).
func manyArgs(calls []*call) ([]string, []any) {
	first := calls[0]
	nk, na := 0, 0
	same := true
	for _, c := range calls {
		nk += len(c.keys)
		na += len(c.args)
		same = same && len(c.keys) == len(first.keys) && len(c.args) == len(first.args)
	}
	keys := make([]string, 0, nk)
	for _, c := range calls {
		keys = append(keys, c.keys...)
	}
	if !same {
		args := make([]any, 0, 2+2*len(calls)+na)
		args = append(args, len(calls), "each")
		for _, c := range calls {
			args = append(args, len(c.keys), len(c.args))
		}
		for _, c := range calls {
			args = append(args, c.args...)
		}
		return keys, args
	}
	var differ []int // positions, from 1, where some call's argument differs
	for j, a := range first.args {
		for _, c := range calls[1:] {
			if !sameArg(a, c.args[j]) {
				differ = append(differ, j+1)
				break
			}
		}
	}
	args := make([]any, 0, 5+len(differ)+len(first.args)+len(calls)*len(differ))
	args = append(args, len(calls), "same", len(first.keys), len(first.args), len(differ))
	for _, j := range differ {
		args = append(args, j)
	}
	args = append(args, first.args...)
	for _, c := range calls {
		for _, j := range differ {
			args = append(args, c.args[j-1])
		}
	}
	return keys, args
}

// sameArg reports whether a and b reach Redis as the same argument; values
// of other types than the limiter sends count as different.
func sameArg(a, b any) bool {
	switch a := a.(type) {
	case string:
		b, ok := b.(string)
		return ok && a == b
	case int:
		b, ok := b.(int)
		return ok && a == b
	case int64:
		b, ok := b.(int64)
		return ok && a == b
	}
	return false
}

// manyReplies reads a many variant's reply: n replies, each an array of
// integers or an error.
func manyReplies(v any, n int) ([][]int64, []error, error) {
	raw, ok := v.([]any)
	if !ok || len(raw) != n {
		return nil, nil, fmt.Errorf("failed to read the script's replies: %T of %d for %d calls", v, len(raw), n)
	}
	res := make([][]int64, n)
	errs := make([]error, n)
	for i, r := range raw {
		switch r := r.(type) {
		case []any:
			res[i], errs[i] = int64s(r)
		case error:
			errs[i] = r
		default:
			errs[i] = fmt.Errorf("failed to read a script reply: %T", r)
		}
	}
	return res, errs, nil
}

// hashTag is what places key on a cluster: the part between the first {
// and the next }, when not empty; else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}
