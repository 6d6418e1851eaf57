package limiter

// The lockout (Policy.Lock) is decided by every decision script, in the
// same run as the check (lock.lua): a policy that locks passes the lock's
// key after its state's and the base time in ms after its arguments
// (withExtras), and gets back lockValues more numbers: the lock's state (0
// none, 1 it held, 2 this denial made it), level and end.

// lockValues is how many numbers a decision script adds for p's lock.
func lockValues(p Policy) int {
	if p.Lock > 0 {
		return 3
	}
	return 0
}

// applyLock reads the lock a decision script reported (v: state, level,
// end) into d. A locked key waits for the lock's end whichever rules have
// room, so every rule refuses until then — and its own retry, when that is
// longer: a client that waits RetryAfterMs is not denied by the same window.
func applyLock(d *Decision, retry1 []int64, v []int64) {
	if len(v) < 3 || v[0] == 0 {
		return
	}
	d.Locked, d.LockLevel, d.LockUntilMs = true, int(v[1]), v[2]
	left := v[2] - d.NowMs
	for i := range d.Rules {
		r := &d.Rules[i]
		r.RetryMs, r.Violated = max(r.RetryMs, left), true
		if retry1 != nil {
			retry1[i] = max(retry1[i], left)
		}
	}
	d.RetryAfterMs = max(d.RetryAfterMs, left)
	d.Binding = binding(*d)
}
