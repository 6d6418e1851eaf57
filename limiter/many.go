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
// ARGV[1]  n, the calls; then the number of keys and of arguments of each
//
//	call, once when all calls have as many (most batches: one
//	policy), else -1 and then per call: its keys, its arguments;
//	then every call's arguments, in order
//
// KEYS     every call's keys, in order
// Returns one reply per call: its array, or its error.
const (
	manyPrelude = `-- many: the calls of one script in one run (limiter/many.go)
local clockRead
local function clock()
  if not clockRead then clockRead = redis.call('TIME') end
  return clockRead
end
local function decideOne(KEYS, ARGV)
`
	manyLoop = `
end
local n = tonumber(ARGV[1])
local nk, na = tonumber(ARGV[2]), tonumber(ARGV[3])
local each = nk < 0 -- a count of keys and arguments per call
local replies = {}
local k, a = 0, 3
if each then a = 2 + 2 * n end
for i = 1, n do
  if each then nk, na = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i]) end
  local keys, args = {}, {}
  for j = 1, nk do keys[j] = KEYS[k + j] end
  for j = 1, na do args[j] = ARGV[a + j] end
  k, a = k + nk, a + na
  local ok, r = pcall(decideOne, keys, args)
  if ok then
    replies[i] = r
  elseif type(r) == 'table' and r.err then
    replies[i] = r
  else
    replies[i] = {err = tostring(r)}
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

// manyArgs lays out calls for their script's many variant.
func manyArgs(calls []*call) ([]string, []any) {
	nk, na := 0, 0
	uniform := true
	for _, c := range calls {
		nk += len(c.keys)
		na += len(c.args)
		uniform = uniform && len(c.keys) == len(calls[0].keys) && len(c.args) == len(calls[0].args)
	}
	keys := make([]string, 0, nk)
	args := make([]any, 0, 3+2*len(calls)+na)
	args = append(args, len(calls))
	if uniform {
		args = append(args, len(calls[0].keys), len(calls[0].args))
	} else {
		args = append(args, -1)
		for _, c := range calls {
			args = append(args, len(c.keys), len(c.args))
		}
	}
	for _, c := range calls {
		keys = append(keys, c.keys...)
	}
	for _, c := range calls {
		args = append(args, c.args...)
	}
	return keys, args
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
