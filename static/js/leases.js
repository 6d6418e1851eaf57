// The leases of an inflight policy (LIMIT/inflight): each live lease is a bar
// (`lease`) from when it was taken, or last renewed, to when it ends by
// itself, on an axis of one lease time either side of now. Bars come from
// the snapshot (a tab that opens sees the leases already held) and from
// lease messages (acquired, renewed, released, expired, from any instance);
// a bar whose end passes on the page's clock leaves at once — a crashed
// holder's lease ends there, whether or not anyone told the page.

import { LEASE } from './messages.js';
import { fmtDuration, fmtInt, shortId, fmtTime } from './format.js';

const RECENT = 64; // newest lease messages, to apply again to a snapshot read before them
const DRAW_MAX = 24; // bars drawn; the caption counts the rest
const CAPTION_EVERY_MS = 250;
const NO_ENTRIES = { exact: false, known: false }; // what the count readout reads of a window of leases

// LEASES_CAPTION says what an inflight policy limits, beside its name.
export const LEASES_CAPTION = 'Requests in flight: each takes a lease before its work and gives it back after; ' +
  'at most limit leases at once, each ending by itself after the lease time unless renewed.';

// leaseNote is the log's line for a lease message.
export function leaseNote(m) {
  const id = typeof m.leaseId === 'string' && m.leaseId ? ' ' + shortId(m.leaseId) : '';
  return 'lease' + id + ' ' + m.kind + ' · ' + m.inFlight + ' / ' + m.limit + ' in flight';
}

export class Leases {
  // ui: {root (the bars' container), caption}; onRelease(id, button) gives
  // one back.
  constructor(ui, writer) {
    this.ui = ui;
    this.w = writer;
    this.onRelease = null;
    this.els = new Map(); // lease id -> bar
    ui.root.addEventListener('click', (ev) => {
      const b = ev.target instanceof Element ? ev.target.closest('button[data-lease-id]') : null;
      if (b && !b.disabled && this.onRelease) this.onRelease(b.dataset.leaseId, b);
    });
    this.clear();
  }

  clear() {
    this.live = new Map(); // id -> {startMs, expiresMs}
    this.recent = [];
    this.leaseMs = 0;
    this.limit = 0;
    this.known = false;
    this.captionAt = -Infinity;
    this.caption = '';
    this.ui.root.replaceChildren();
    this.els.clear();
  }

  // snapshot takes the leases Redis listed (an inflight window's snapshot:
  // `leases`, absent when none is live; windowMs the lease time), then the
  // lease messages Redis ran after it read them.
  snapshot(m) {
    if (typeof m.nowMs !== 'number') return;
    if (m.windowMs > 0) this.leaseMs = m.windowMs;
    if (typeof m.limit === 'number') this.limit = m.limit;
    this.known = true;
    this.live = new Map();
    for (const l of Array.isArray(m.leases) ? m.leases : []) {
      if (l && typeof l.id === 'string') this.live.set(l.id, { startMs: Number(l.startMs), expiresMs: Number(l.expiresMs) });
    }
    this.recent = this.recent.filter((r) => r.nowMs >= m.nowMs);
    for (const r of this.recent) this.apply(r);
  }

  // lease applies one lease message.
  lease(m) {
    if (typeof m.leaseId !== 'string' || typeof m.nowMs !== 'number') return;
    if (typeof m.limit === 'number') this.limit = m.limit;
    this.recent.push(m);
    if (this.recent.length > RECENT) this.recent.shift();
    this.apply(m);
  }

  apply(m) {
    if (m.kind === LEASE.ACQUIRED || m.kind === LEASE.RENEWED) {
      this.live.set(m.leaseId, { startMs: Number(m.startMs), expiresMs: Number(m.expiresMs) });
    } else if (m.kind === LEASE.RELEASED || m.kind === LEASE.EXPIRED) {
      this.live.delete(m.leaseId);
    }
  }

  // reset: the window was emptied, every lease with it.
  reset() {
    this.live = new Map();
    this.recent = [];
  }

  // expire drops the leases whose end has passed at t.
  expire(t) {
    for (const [id, l] of this.live) if (l.expiresMs <= t) this.live.delete(id);
  }

  inFlight() {
    return this.live.size;
  }

  // earliest is the live lease that ends first, or null.
  earliest() {
    let e = null;
    for (const l of this.live.values()) if (!e || l.expiresMs < e.expiresMs) e = l;
    return e;
  }

  // readouts shows the count ("k / N", in flight of the limit) and the
  // ring, counting down to the moment the first lease ends by itself.
  readouts(t, counter, ring) {
    if (!this.known) return;
    counter.render(t, NO_ENTRIES, [], { count: this.inFlight(), limit: this.limit || null }, '');
    const e = this.earliest();
    ring.render(t, e ? e.expiresMs - this.leaseMs : null, this.leaseMs, null, 'until the first lease ends');
  }

  // render places the bars at t: the plot spans [t − lease time, t + lease
  // time], now in the middle.
  render(t) {
    const L = this.leaseMs;
    if (!(L > 0)) return;
    const sorted = Array.from(this.live, ([id, l]) => ({ id: id, startMs: l.startMs, expiresMs: l.expiresMs }))
      .sort((a, b) => a.startMs - b.startMs || (a.id < b.id ? -1 : 1));
    const shown = sorted.slice(0, DRAW_MAX);
    const keep = new Set(shown.map((l) => l.id));
    for (const [id, el] of this.els) {
      if (!keep.has(id)) {
        el.remove();
        this.els.delete(id);
      }
    }
    const rows = Math.max(shown.length, Math.min(this.limit, DRAW_MAX), 1);
    const left = t - L;
    const pct = (ms) => (Math.max(0, Math.min(2 * L, ms - left)) / (2 * L) * 100);
    shown.forEach((l, i) => {
      let el = this.els.get(l.id);
      if (!el) {
        el = bar(l.id);
        this.ui.root.append(el);
        this.els.set(l.id, el);
      }
      this.w.attr(el, 'data-start-ms', String(l.startMs));
      this.w.attr(el, 'data-expires-ms', String(l.expiresMs));
      this.w.attr(el, 'title', 'lease ' + l.id + '\nfrom ' + fmtTime(l.startMs) + ' to ' + fmtTime(l.expiresMs));
      const x0 = pct(l.startMs);
      el.style.left = x0.toFixed(2) + '%';
      el.style.width = Math.max(0.5, pct(l.expiresMs) - x0).toFixed(2) + '%';
      el.style.top = (6 + 88 * i / rows).toFixed(2) + '%';
      el.style.height = 'calc(' + (88 / rows).toFixed(2) + '% - 4px)';
    });
    const p = performance.now();
    if (p - this.captionAt >= CAPTION_EVERY_MS) {
      this.captionAt = p;
      const more = sorted.length - shown.length;
      this.w.text(this.ui.caption, 'in flight: ' + fmtInt(sorted.length) + ' of ' + fmtInt(this.limit) +
        '. Each bar is a lease, from when it was taken (or last renewed) to when it ends by itself, ' +
        fmtDuration(L) + ' later, unless renewed or released; the line is now.' +
        (more > 0 ? ' ' + fmtInt(more) + ' more are not drawn.' : '') +
        ' "Take a lease" acquires one from this page; a bar\'s "release" gives it back.');
    }
  }
}

function bar(id) {
  const el = document.createElement('div');
  el.className = 'lease';
  el.dataset.testid = 'lease';
  el.dataset.leaseId = id;
  const label = document.createElement('span');
  label.className = 'lease-label';
  label.textContent = shortId(id);
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'lease-release';
  b.dataset.testid = 'lease-release';
  b.dataset.leaseId = id;
  b.textContent = 'release';
  b.title = 'Give this lease back: DELETE /api/v1/leases/' + id;
  el.append(label, b);
  return el;
}
