// The state of a window kept by an algorithm other than the log:
// per rule a few numbers from the last snapshot (a member named for the
// algorithm), moved on to any instant t exactly as the algorithm's script
// would read them — by the algorithm's own module (algorithms.js). Decisions between snapshots
// say the binding rule's count at once; the snapshot that follows every
// change brings the state itself.
//
// It answers the count readout the way WindowModel does (known, exact,
// count, countIn), so one readout serves every algorithm.

import { algorithm } from './algorithms.js';

export class AlgoModel {
  constructor() {
    this.clear();
  }

  clear() {
    this.algorithm = '';
    this.known = false;
    this.exact = true; // countIn always answers
    this.snapRules = null;
    this.rules = []; // [{limit, windowMs, count, <algorithm>: its state}] of the last snapshot
    this.snapNowMs = -Infinity;
    this.override = null; // {limit, count, at}: a decision newer than the snapshot
    this.version = 0;
  }

  setAlgorithm(name) {
    this.algorithm = name || '';
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
  // and the algorithm's own numbers, moved on from the snapshot by the
  // algorithm's module.
  at(r, t) {
    const a = algorithm(this.algorithm);
    if (a && a.at && r[this.algorithm]) return a.at(r, Math.floor(t), this.snapNowMs);
    return { used: typeof r.count === 'number' ? r.count : 0, resetAt: null };
  }
}

// emptyRule is a rule's state on a fresh key at t, as its algorithm's
// module says: e.g. nothing counted, no TAT ahead of now, a full bucket.
function emptyRule(name, limit, windowMs, t) {
  const r = { limit: limit, windowMs: windowMs, count: 0, remaining: limit };
  const a = algorithm(name);
  const state = a && a.empty ? a.empty(limit, windowMs, t) : null;
  if (state) r[name] = state;
  return r;
}
