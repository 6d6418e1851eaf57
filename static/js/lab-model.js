// The lab's model: the requests a lab has seen, each decided by every
// algorithm, and what they add up to. No DOM here. The first algorithm (the
// log, exact) is the one the others are compared with; the words about each
// come from its module (algorithms.js).

import { algorithm } from './algorithms.js';
import { numberWord } from './format.js';

export const MAX_MARKS = 1200; // requests kept per lab; older ones drop off the axis
const AXIS_PAD = 0.15; // the axis's margin each side, of the requests' span
const AXIS_MIN_PAD_MS = 20; // and at least this: one request has no span

// maxInWindow is the most of the ascending times ms inside any sliding window
// (t − windowMs, t]: what the rule is meant to bound.
export function maxInWindow(ms, windowMs) {
  return busiest(ms, windowMs).count;
}

// busiest is that window: its count and the window (toMs − windowMs, toMs]
// ending at its last request.
export function busiest(ms, windowMs) {
  let best = { count: 0, toMs: 0 };
  let lo = 0;
  for (let hi = 0; hi < ms.length; hi++) {
    while (ms[lo] <= ms[hi] - windowMs) lo++;
    if (hi - lo + 1 > best.count) best = { count: hi - lo + 1, toMs: ms[hi] };
  }
  return best;
}

export class LabModel {
  constructor(algorithms) {
    this.algorithms = algorithms;
    this.reference = algorithms[0]; // exact: the others are compared with it
    this.clear();
  }

  clear() {
    this.requests = []; // {id, nowMs, limit, windowMs, results: {alg: {allowed, ...}}}, ascending nowMs
    this.ids = new Set();
    this.limit = 0;
    this.windowMs = 0;
    this.version = (this.version || 0) + 1;
  }

  // resetAt forgets the requests decided before a reset at nowMs (on the
  // limiter's clock): those after it belong to the run that followed.
  resetAt(nowMs) {
    if (typeof nowMs !== 'number') {
      this.clear();
      return;
    }
    const keep = this.requests.filter((r) => r.nowMs >= nowMs);
    this.clear();
    for (const r of keep) {
      this.requests.push(r);
      this.ids.add(r.id);
      this.limit = r.limit;
      this.windowMs = r.windowMs;
    }
  }

  // add records a lab message once (by id); false when already known.
  add(m) {
    if (!m || typeof m.id !== 'string' || this.ids.has(m.id) || !Array.isArray(m.results)) return false;
    const results = {};
    for (const r of m.results) results[r.algorithm] = r;
    const req = { id: m.id, nowMs: m.nowMs, limit: m.limit, windowMs: m.windowMs, results: results };
    this.ids.add(m.id);
    let i = this.requests.length;
    while (i > 0 && this.requests[i - 1].nowMs > req.nowMs) i--;
    this.requests.splice(i, 0, req);
    if (this.requests.length > MAX_MARKS) this.ids.delete(this.requests.shift().id);
    this.limit = m.limit;
    this.windowMs = m.windowMs;
    this.version++;
    return true;
  }

  // differs reports whether alg decided req unlike the reference (the log).
  differs(req, alg) {
    const a = req.results[alg];
    const l = req.results[this.reference];
    return alg !== this.reference && !!a && !!l && a.allowed !== l.allowed;
  }

  // stats per algorithm: allowed, denied, max in any window, disagreements.
  stats() {
    const out = {};
    for (const alg of this.algorithms) {
      const ms = [];
      let denied = 0;
      let differs = 0;
      for (const r of this.requests) {
        const d = r.results[alg];
        if (!d) continue;
        if (d.allowed) ms.push(r.nowMs);
        else denied++;
        if (this.differs(r, alg)) differs++;
      }
      const b = busiest(ms, this.windowMs || 1);
      out[alg] = { allowed: ms.length, denied: denied, max: b.count, maxToMs: b.toMs, differs: differs };
    }
    return out;
  }

  // axis is the shared time axis, zoomed to the traffic: the span of the
  // requests and a margin each side (AXIS_PAD of it, AXIS_MIN_PAD_MS at
  // least). Ten boundary requests 50 ms either side of a fixed-window edge
  // then spread over the lane instead of sitting on one point of 20 s; the
  // edges that matter — those the traffic crossed — lie within the span.
  axis() {
    const w = this.windowMs || 1000;
    if (this.requests.length === 0) return null;
    const first = this.requests[0].nowMs;
    const last = this.requests[this.requests.length - 1].nowMs;
    const pad = Math.max(AXIS_MIN_PAD_MS, Math.round((last - first) * AXIS_PAD));
    return { start: first - pad, end: last + pad, windowMs: w };
  }
}

// phrase names an algorithm in a sentence: "the sliding counter".
function phrase(name) {
  const a = algorithm(name);
  return (a && a.phrase) || name;
}

export function list(algs) {
  const names = algs.map(phrase);
  if (names.length <= 1) return names.join('');
  return names.slice(0, -1).join(', ') + ' and ' + names[names.length - 1];
}

// summary is one sentence on what the visitor just saw.
export function summary(model, stats, traffic) {
  const n = model.requests.length;
  if (n === 0) return '';
  const limit = model.limit;
  const secs = model.windowMs / 1000;
  const rule = limit + ' per ' + secs + ' s';
  const over = model.algorithms.filter((a) => stats[a].max > limit);
  const differ = model.algorithms.filter((a) => stats[a].differs > 0);
  let s = n + ' request' + (n === 1 ? '' : 's') + ' under ' + rule + ': ';
  if (over.length) {
    over.sort((a, b) => stats[b].max - stats[a].max);
    s += phrase(over[0]) + ' let up to ' + stats[over[0]].max + ' through within one ' + secs + ' s window';
    if (over.length > 1) s += ' (' + over.slice(1).map((a) => phrase(a) + ' ' + stats[a].max).join(', ') + ')';
    // Why: a strong note of any algorithm over the limit (the fixed
    // window's edge), else the busiest one's own.
    const notes = over.map((a) => {
      const m = algorithm(a);
      return m && m.overNote ? m.overNote(traffic) : null;
    });
    const note = notes.find((n) => n && n.strong) || notes[0];
    if (note) s += ' — ' + note.text;
    s += ', while ' + phrase(model.reference) + ' never allowed more than ' + stats[model.reference].max + '.';
  } else if (differ.length) {
    s += 'no algorithm let more than ' + limit + ' through in any window, but ' + list(differ) +
      ' decided ' + differ.map((a) => stats[a].differs).reduce((x, y) => Math.max(x, y), 0) +
      ' request(s) unlike ' + phrase(model.reference) + ' (outlined): ' +
      (differ.map((a) => algorithm(a) && algorithm(a).differNote).find(Boolean) || 'each approximates the window differently.');
  } else {
    s += 'all ' + numberWord(model.algorithms.length) + ' decided every request alike; none let more than ' + limit + ' through in any window.';
  }
  return s;
}
