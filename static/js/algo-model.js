// The state of a window kept by an algorithm other than the log:
// per rule a few numbers from the last snapshot (fixed: a counter; counter:
// two; gcra: a timestamp; bucket: tokens), moved on to any instant t exactly
// as the algorithm's script would read them. Decisions between snapshots
// say the binding rule's count at once; the snapshot that follows every
// change brings the state itself.
//
// It answers the count readout the way WindowModel does (known, exact,
// count, countIn), so one readout serves every algorithm.

export const LOG = 'log';
const EPS = 1e-9; // keeps floor() of a whole number computed in floats whole

export class AlgoModel {
  constructor() {
    this.clear();
  }

  clear() {
    this.algorithm = LOG;
    this.known = false;
    this.exact = true; // countIn always answers
    this.snapRules = null;
    this.rules = []; // [{limit, windowMs, count, fixed|counter|gcra|bucket}] of the last snapshot
    this.snapNowMs = -Infinity;
    this.override = null; // {limit, count, at}: a decision newer than the snapshot
    this.version = 0;
  }

  setAlgorithm(name) {
    this.algorithm = name || LOG;
  }

  snapshot(m) {
    if (typeof m.nowMs !== 'number' || !Array.isArray(m.rules) || m.nowMs < this.snapNowMs) return;
    if (m.algorithm) this.algorithm = m.algorithm;
    this.known = true;
    this.snapNowMs = m.nowMs;
    this.rules = m.rules.filter((r) => r && r.limit > 0 && r.windowMs > 0);
    if (this.override && this.override.at <= m.nowMs) this.override = null;
    this.version++;
  }

  decision(m) {
    if (typeof m.count !== 'number' || typeof m.limit !== 'number' || typeof m.nowMs !== 'number') return;
    if (m.nowMs < this.snapNowMs) return; // the state already includes it
    this.override = { limit: m.limit, count: m.count, at: m.nowMs };
    this.version++;
  }

  // reset: every rule starts afresh at nowMs.
  reset(nowMs) {
    const t = typeof nowMs === 'number' ? nowMs : this.snapNowMs;
    this.known = true;
    this.snapNowMs = t;
    this.override = null;
    this.rules = this.rules.map((r) => emptyRule(this.algorithm, r.limit, r.windowMs, t));
    this.version++;
  }

  rule(windowMs) {
    return this.rules.find((r) => r.windowMs === windowMs) || null;
  }

  longest() {
    let best = null;
    for (const r of this.rules) if (!best || r.windowMs > best.windowMs) best = r;
    return best;
  }

  // countIn is the count of the rule with that window at t (what the
  // script would report as used), or null when no snapshot told it.
  countIn(windowMs, t) {
    const r = this.rule(windowMs);
    if (!r) return null;
    if (this.override && this.override.limit === r.limit) return this.override.count;
    return this.at(r, t).used;
  }

  count(t) {
    const r = this.longest();
    return r ? this.countIn(r.windowMs, t) : null;
  }

  // at is rule r's state at t: {used, resetAt (null when it has full room)}
  // and the algorithm's own numbers, moved on from the snapshot.
  at(r, t) {
    t = Math.floor(t);
    const W = r.windowMs;
    const L = r.limit;
    if (r.fixed) {
      let start = r.fixed.windowStartMs;
      let count = r.fixed.count;
      if (t >= start + W) {
        start = Math.floor(t / W) * W;
        count = 0;
      }
      return { used: count, resetAt: count > 0 ? start + W : null, start: start, count: count };
    }
    if (r.counter) {
      let start = r.counter.windowStartMs;
      let prev = r.counter.prevCount;
      let curr = r.counter.currCount;
      if (t >= start + W) {
        const next = Math.floor(t / W) * W;
        prev = next === start + W ? curr : 0;
        curr = 0;
        start = next;
      }
      const left = W - (t - start);
      const weight = left / W;
      const resetAt = curr > 0 ? start + 2 * W : prev > 0 ? start + W : null;
      return {
        used: curr + Math.ceil(prev * left / W - EPS), resetAt: resetAt,
        start: start, prev: prev, curr: curr, weight: weight, estimate: prev * weight + curr,
      };
    }
    if (r.gcra) {
      const tat = Math.max(r.gcra.tatMs, t);
      const T = r.gcra.emissionIntervalMs > 0 ? r.gcra.emissionIntervalMs : W / L;
      const remaining = Math.max(0, Math.floor((W - (tat - t)) * L / W + EPS));
      return { used: L - remaining, resetAt: tat > t ? tat : null, tat: tat, interval: T, remaining: remaining };
    }
    if (r.bucket) {
      const base = this.snapNowMs;
      const tokens = Math.min(L, r.bucket.tokens + Math.max(0, t - base) * L / W);
      const fullAt = base + (L - r.bucket.tokens) * W / L;
      return { used: L - Math.floor(tokens + EPS), resetAt: tokens < L ? fullAt : null, tokens: tokens };
    }
    return { used: typeof r.count === 'number' ? r.count : 0, resetAt: null };
  }
}

// emptyRule is a rule's state on a fresh key at t: nothing counted, no TAT
// ahead of now, a full bucket.
function emptyRule(algorithm, limit, windowMs, t) {
  const r = { limit: limit, windowMs: windowMs, count: 0, remaining: limit };
  const start = Math.floor(t / windowMs) * windowMs;
  if (algorithm === 'fixed') r.fixed = { windowStartMs: start, count: 0 };
  else if (algorithm === 'counter') r.counter = { windowStartMs: start, prevCount: 0, currCount: 0 };
  else if (algorithm === 'gcra') r.gcra = { tatMs: t, emissionIntervalMs: windowMs / limit };
  else if (algorithm === 'bucket') r.bucket = { tokens: limit, updatedMs: t };
  return r;
}
