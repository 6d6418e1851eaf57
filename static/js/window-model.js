// The watched window as the page knows it, kept in bounded state whatever the
// window holds. Two sources describe it: snapshots (Redis lists the oldest
// ≤ 1,000 entries and the true count) and recorded decisions (each one entry,
// seen as it happens). While the whole window is known the entries are kept
// one by one (`exact`); beyond that only counts per time bin are kept, and
// what neither source placed is counted but not invented.
//
// Every message costs O(1), or O(its own entries) for a snapshot; the frame
// calls expire() and reads the rest.

import { recordsEntry } from './messages.js';
import { adjustEntries } from './adjust.js';

export const SPAN = 1.2; // the timeline shows 1.2 windows: the window plus what just left it
export const BINS = 600; // time bins across the span
export const LANES = 7; // dots spread over lanes so same-millisecond entries stay visible
const RING = 1024; // bins kept: the span plus room for clocks that disagree a little
const EXACT_CAP = 1500; // entries kept one by one; beyond this, counts per bin only
const RECENT = 512; // newest recorded decisions, to merge with a snapshot that raced them
const ADJUSTED = 64; // newest refunds and settles, to apply again to a snapshot read before them

export class WindowModel {
  constructor() {
    this.seenBins = new Int32Array(RING); // recorded decisions per bin, since seenSince
    this.listedBins = new Int32Array(RING); // the last snapshot's entries per bin
    this.recentIds = new Array(RECENT);
    this.recentMs = new Float64Array(RECENT); // each one's score
    this.recentAt = new Float64Array(RECENT); // when it was recorded: its score, or before it when booked
    this.windowMs = 0;
    this.binMs = 0;
    this.longestLimit = 0; // the longest rule's limit, when no other rule shares it
    this.clear();
  }

  // clear forgets everything known about the window (another window is watched).
  clear() {
    this.version = (this.version || 0) + 1; // changes whenever what is drawn may change
    this.known = false; // a snapshot or reset has told the count
    this.exact = false; // entries holds every entry in the window
    this.truncated = false;
    this.entries = new Map(); // id -> {ms, lane}, in-window entries while exact
    this.laneLast = new Array(LANES).fill(-Infinity);
    this.listedMs = new Float64Array(0); // the last snapshot's scores, oldest first
    this.listedFirst = 0; // index of the first listed entry still in the window
    this.horizon = -Infinity; // every entry with a score ≤ horizon was listed
    this.snapRules = null; // per-rule counts of the last snapshot
    this.snapNowMs = -Infinity;
    this.countBase = 0; // the longest rule's count as last reported…
    this.countAt = -Infinity; // …at this Redis time
    this.countExtra = 0; // entries recorded after countAt
    this.oldestMs = null;
    this.newestMs = null; // the newest score kept: after now while a booking waits
    this.recentN = 0;
    this.adjusted = []; // refunds and settles a snapshot may not show yet, oldest first
    this.reconnected();
  }

  // reconnected: decisions sent while no socket was open are lost, so the
  // page no longer knows it has seen every recorded entry.
  reconnected() {
    this.version++;
    this.seenSince = null; // from this Redis time on, every recorded entry was seen
    this.seenHead = -Infinity; // newest bin written
    this.seenBins.fill(0);
  }

  setRules(rules) {
    let longest = null;
    for (const r of rules) if (!longest || r.windowMs > longest.windowMs) longest = r;
    this.longestLimit = longest && rules.filter((r) => r.limit === longest.limit).length === 1 ? longest.limit : 0;
    if (longest) this.setWindow(longest.windowMs);
  }

  setWindow(ms) {
    if (!(ms > 0) || ms === this.windowMs) return;
    this.windowMs = ms;
    this.binMs = SPAN * ms / BINS;
    this.listedBins.fill(0);
    this.seenBins.fill(0);
    this.seenHead = -Infinity;
  }

  bin(ms) {
    return Math.floor(ms / this.binMs);
  }

  snapshot(m) {
    if (m.windowMs > 0) this.setWindow(m.windowMs);
    if (!(this.binMs > 0) || typeof m.nowMs !== 'number') return;
    this.version++;
    const list = Array.isArray(m.entries)
      ? m.entries.filter((e) => e && typeof e.id === 'string' && typeof e.ms === 'number')
      : [];
    this.known = true;
    this.truncated = !!m.truncated;
    this.snapNowMs = m.nowMs;
    this.snapRules = Array.isArray(m.rules) ? m.rules : null;
    if (this.seenSince === null) this.seenSince = m.nowMs;

    this.listedMs = Float64Array.from(list, (e) => e.ms);
    this.listedFirst = 0;
    this.horizon = this.truncated && list.length ? list[list.length - 1].ms : m.nowMs;
    this.listedBins.fill(0);
    for (const e of list) this.listedBins[mod(this.bin(e.ms), RING)]++;

    if (typeof m.count === 'number' && m.nowMs >= this.countAt) {
      this.countBase = m.count;
      this.countAt = m.nowMs;
      this.countExtra = 0;
      this.eachRecent((id, ms, at) => {
        if (at > m.nowMs) this.countExtra++;
      });
    }

    // A refund or settle that Redis ran after this snapshot's read (or in
    // its millisecond) is not in it yet; older ones are.
    this.adjusted = this.adjusted.filter((a) => a.nowMs >= m.nowMs);
    if (this.truncated) {
      this.exact = false;
      this.entries = new Map();
      return;
    }
    // The whole window is listed: keep each entry, and its lane if it had one.
    const cutoff = m.nowMs - this.windowMs;
    const old = this.entries;
    const next = new Map();
    for (const e of list) {
      if (e.ms <= cutoff) continue;
      const had = old.get(e.id);
      next.set(e.id, { ms: e.ms, lane: had ? had.lane : this.pickLane(e.ms) });
    }
    // Entries recorded after Redis answered the snapshot are not in it yet.
    this.eachRecent((id, ms, at) => {
      if (at >= m.nowMs && !next.has(id)) {
        const had = old.get(id);
        next.set(id, { ms: ms, lane: had ? had.lane : this.pickLane(ms) });
      }
    });
    for (const a of this.adjusted) adjustEntries(next, a, (ms) => this.pickLane(ms));
    this.entries = next;
    this.exact = next.size <= EXACT_CAP;
    if (!this.exact) this.entries = new Map();
  }

  // A booked check (bookedMs after nowMs: it waits for its slot) records
  // its entry at once, scored at the slot, right of now; its count
  // describes the window at the slot, not now.
  decision(m) {
    if (typeof m.nowMs !== 'number') return;
    const booked = typeof m.bookedMs === 'number' && m.bookedMs > m.nowMs;
    let counted = false;
    if (!booked && typeof m.count === 'number' && this.longestLimit > 0 && m.limit === this.longestLimit && m.nowMs >= this.countAt) {
      this.countBase = m.count; // the longest rule's count, this request included
      this.countAt = m.nowMs;
      this.countExtra = 0;
      counted = true;
    }
    if (!recordsEntry(m)) return;
    this.version++;
    const ms = booked ? m.bookedMs : m.nowMs;
    if (!counted && m.nowMs > this.countAt) this.countExtra++;
    this.recentIds[this.recentN % RECENT] = m.id;
    this.recentMs[this.recentN % RECENT] = ms;
    this.recentAt[this.recentN % RECENT] = m.nowMs;
    this.recentN++;
    if (!booked) this.addSeen(ms); // bins count the past; a snapshot lists a booking
    if (this.exact && !this.entries.has(m.id)) {
      this.entries.set(m.id, { ms: ms, lane: this.pickLane(ms) });
      if (this.entries.size > EXACT_CAP) {
        this.exact = false;
        this.entries = new Map();
      }
    }
  }

  // adjustment applies a refund or a settle of one check (an `adjustment`
  // message: its id, the entries it had (was) and has now) at once: the
  // entries leave, or join at the check's own score. The snapshot that
  // follows says the same, exactly.
  adjustment(m) {
    if (typeof m.id !== 'string' || typeof m.nowMs !== 'number') return;
    const was = Math.max(0, Number(m.was) || 0);
    const now = Math.max(0, Number(m.now) || 0);
    if (typeof m.count === 'number' && this.longestLimit > 0 && m.limit === this.longestLimit && m.nowMs >= this.countAt) {
      this.countBase = m.count; // the longest rule's count after it
      this.countAt = m.nowMs;
      this.countExtra = 0;
    }
    if (was === now) return;
    this.version++;
    const first = this.entries.get(m.id);
    const a = { id: m.id, was: was, now: now, nowMs: m.nowMs, ms: first ? first.ms : this.recentScore(m.id) };
    if (now === 0) this.forgetRecent(m.id); // no snapshot may bring it back
    this.adjusted.push(a);
    if (this.adjusted.length > ADJUSTED) this.adjusted.shift();
    if (this.exact) adjustEntries(this.entries, a, (ms) => this.pickLane(ms));
  }

  recentScore(id) {
    let ms = null;
    this.eachRecent((rid, rms) => {
      if (rid === id) ms = rms;
    });
    return ms;
  }

  forgetRecent(id) {
    const n = Math.min(this.recentN, RECENT);
    for (let i = this.recentN - n; i < this.recentN; i++) if (this.recentIds[i % RECENT] === id) this.recentIds[i % RECENT] = null;
  }

  // reset: the window was emptied at nowMs.
  reset(nowMs) {
    const t = typeof nowMs === 'number' ? nowMs : this.snapNowMs;
    this.version++;
    this.known = true;
    this.exact = true;
    this.truncated = false;
    this.entries = new Map();
    this.laneLast.fill(-Infinity);
    this.listedMs = new Float64Array(0);
    this.listedFirst = 0;
    this.listedBins.fill(0);
    this.horizon = t;
    this.snapRules = null;
    this.countBase = 0;
    this.countAt = t;
    this.countExtra = 0;
    this.recentN = 0;
    this.adjusted = [];
    this.seenBins.fill(0);
    this.seenHead = -Infinity;
    this.seenSince = t;
  }

  addSeen(ms) {
    if (!(this.binMs > 0)) return;
    const k = this.bin(ms);
    if (k > this.seenHead) {
      if (this.seenHead === -Infinity || k - this.seenHead >= RING) this.seenBins.fill(0);
      else for (let j = this.seenHead + 1; j <= k; j++) this.seenBins[mod(j, RING)] = 0;
      this.seenHead = k;
    } else if (k <= this.seenHead - RING) {
      return; // older than anything drawn
    }
    this.seenBins[mod(k, RING)]++;
  }

  // eachRecent calls f(id, ms, at) for each recent recorded decision (its
  // score and when it was recorded), but those since refunded.
  eachRecent(f) {
    const n = Math.min(this.recentN, RECENT);
    for (let i = this.recentN - n; i < this.recentN; i++) {
      const id = this.recentIds[i % RECENT];
      if (id !== null) f(id, this.recentMs[i % RECENT], this.recentAt[i % RECENT]);
    }
  }

  // pickLane puts a new dot in the lane whose newest dot is oldest, so a
  // burst of same-millisecond entries fans out instead of stacking.
  pickLane(ms) {
    let best = 0;
    for (let i = 1; i < LANES; i++) if (this.laneLast[i] < this.laneLast[best]) best = i;
    this.laneLast[best] = ms;
    return best;
  }

  // expire drops what slid out (score ≤ t − window) and finds the oldest
  // score still inside. Once per frame: O(entries kept), at most EXACT_CAP.
  expire(t) {
    const cutoff = t - this.windowMs;
    let oldest = Infinity;
    let newest = -Infinity;
    if (this.exact) {
      for (const [id, e] of this.entries) {
        if (e.ms <= cutoff) {
          this.entries.delete(id);
          this.version++;
        } else {
          if (e.ms < oldest) oldest = e.ms;
          if (e.ms > newest) newest = e.ms;
        }
      }
    } else {
      if (this.listedMs.length) newest = this.listedMs[this.listedMs.length - 1];
      this.eachRecent((id, ms) => (newest = Math.max(newest, ms)));
    }
    this.newestMs = newest === -Infinity ? null : newest; // a booking's score is after t
    while (this.listedFirst < this.listedMs.length && this.listedMs[this.listedFirst] <= cutoff) this.listedFirst++;
    if (!this.exact) {
      if (this.listedFirst < this.listedMs.length) oldest = this.listedMs[this.listedFirst];
      else oldest = this.firstKnownAfter(cutoff);
    }
    this.oldestMs = oldest === Infinity ? null : oldest;
  }

  firstKnownAfter(cutoff) {
    const k0 = this.bin(cutoff);
    for (let k = k0; k <= this.seenHead && k < k0 + RING; k++) {
      if (this.knownAt(k) > 0) return Math.max((k * this.binMs), cutoff + 1);
    }
    return Infinity;
  }

  // count is the window's true count as well as the page knows it: exact
  // while every entry is kept; otherwise the last count Redis reported,
  // plus entries recorded since, minus the known ones that slid out since.
  count(t) {
    if (!this.known) return null;
    if (this.exact) return this.entries.size;
    const slid = this.countAt > -Infinity ? this.knownBetween(this.countAt - this.windowMs, t - this.windowMs) : 0;
    return Math.max(0, Math.round(this.countBase + this.countExtra - slid));
  }

  // countIn counts the entries in the last windowMs (another rule's window)
  // while every entry is kept; null otherwise.
  countIn(windowMs, t) {
    if (!this.exact) return null;
    const lo = t - windowMs;
    let n = 0;
    for (const e of this.entries.values()) if (e.ms > lo) n++;
    return n;
  }

  // knownAt is the number of entries the page has placed in bin k: those the
  // snapshot listed up to its horizon, those seen recorded after it.
  knownAt(k) {
    return this.listedAt(k) + this.seenAfterListedAt(k);
  }

  listedAt(k) {
    return k * this.binMs <= this.horizon ? this.listedBins[mod(k, RING)] : 0;
  }

  seenAfterListedAt(k) {
    if (this.seenSince === null || k > this.seenHead || k <= this.seenHead - RING) return 0;
    const b0 = k * this.binMs;
    if (b0 + this.binMs <= this.horizon) return 0; // wholly listed
    const s = this.seenBins[mod(k, RING)];
    if (b0 > this.horizon) return s;
    return Math.max(0, s - this.listedAt(k)); // the bin that holds the horizon
  }

  // knownBetween sums the placed entries with scores in (a, b], pro rata
  // for the bins at either end.
  knownBetween(a, b) {
    if (!(b > a) || !(this.binMs > 0)) return 0;
    let n = 0;
    const k1 = this.bin(b);
    for (let k = Math.max(this.bin(a), k1 - RING + 1); k <= k1; k++) {
      const b0 = k * this.binMs;
      const over = Math.min(b, b0 + this.binMs) - Math.max(a, b0);
      if (over > 0) n += this.knownAt(k) * over / this.binMs;
    }
    return n;
  }

  // density summarises, for drawing at time t, what is placed and what is
  // only counted: `unplaced` entries of the true count that no source put
  // anywhere lie in the gap between the snapshot's horizon and the moment
  // this tab began seeing decisions; estimateAt spreads them evenly there.
  density(t) {
    const cutoff = t - this.windowMs;
    const count = this.count(t) || 0;
    const listed = Math.max(0, this.listedMs.length - this.listedFirst);
    let seen = 0;
    const k1 = this.bin(t);
    for (let k = this.bin(cutoff); k <= k1; k++) {
      const s = this.seenAfterListedAt(k);
      if (!s) continue;
      // Entries seen are all in the past; only the bin at the cutoff is
      // partly out of the window.
      const b0 = k * this.binMs;
      const over = b0 + this.binMs - Math.max(cutoff, b0);
      if (over > 0) seen += s * Math.min(1, over / this.binMs);
    }
    seen = Math.round(seen);
    const unplaced = Math.max(0, count - listed - seen);
    const lo = Math.max(this.horizon, cutoff);
    const hi = this.seenSince === null ? t : Math.min(this.seenSince, t);
    const gap = hi > lo ? { lo: lo, hi: hi } : null;
    const d = { count: count, listed: listed, seen: seen, unplaced: unplaced, gap: gap, perMs: 0 };
    if (gap && unplaced > 0) d.perMs = unplaced / (gap.hi - gap.lo);
    return d;
  }

  // estimateAt is bin k's share of the unplaced entries.
  estimateAt(k, d) {
    if (!d.perMs) return 0;
    const b0 = k * this.binMs;
    const over = Math.min(d.gap.hi, b0 + this.binMs) - Math.max(d.gap.lo, b0);
    return over > 0 ? d.perMs * over : 0;
  }
}

function mod(k, n) {
  return ((k % n) + n) % n;
}
