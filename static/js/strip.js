// The timeline's strip: up to 200 entries (DOM_MAX), each an element
// (`timeline-entry`) at a fixed left offset in one strip that moves with one
// transform; a burst of them fans out so every entry shows.

import { LANES } from './window-model.js';

const GHOST_MS = 650; // how long an entry that left fades (a copy without the testid)
const GHOSTS_MAX = 256;

// A burst — more dots than lanes within one dot's width, e.g. a race's 200
// entries in a few milliseconds — fans out into a grid that ends at the
// burst's newest score, so every entry stays visible.
const DOT_PX = 14; // a dot's diameter
const FAN_ROWS = 13; // rows of a dense fan (smaller dots), between the lanes' top and bottom
const FAN_STEP_PX = 10; // columns apart, at most
const FAN_MAX_PX = 160; // the widest a fan gets

// fan places the dots of items ({ms, lane}, ascending ms) at pxPerMs: each
// gets {dx, row, rows}, dx in px from its own score (0 outside a burst),
// row and rows its place across the plot's height (rows 0: its lane).
export function fan(items, pxPerMs) {
  const out = new Array(items.length);
  const reach = DOT_PX / pxPerMs; // ms within one dot's width
  for (let i = 0; i < items.length;) {
    let j = i + 1;
    while (j < items.length && items[j].ms - items[i].ms < reach) j++;
    const n = j - i;
    if (n <= LANES) {
      for (let k = i; k < j; k++) out[k] = { dx: 0, row: items[k].lane, rows: 0 };
    } else {
      const rows = n > 2 * LANES ? FAN_ROWS : LANES;
      const cols = Math.ceil(n / rows);
      const step = Math.min(FAN_STEP_PX, FAN_MAX_PX / (cols - 1));
      const end = items[j - 1].ms;
      for (let k = i; k < j; k++) {
        const col = Math.floor((k - i) / rows);
        out[k] = { dx: (end - items[k].ms) * pxPerMs - (cols - 1 - col) * step, row: (k - i) % rows, rows: rows };
      }
    }
    i = j;
  }
  return out;
}

// future marks an entry scored after t — a booked check's, waiting for its
// slot — with data-future, until the clock reaches it.
function future(el, t) {
  const f = Number(el.dataset.ms) > t;
  if (el.future === f) return;
  el.future = f;
  el.dataset.future = f ? 'true' : 'false';
  el.classList.toggle('is-future', f);
}

// Strip holds one element per entry. Each sits at a fixed left offset from
// the strip's origin; only the strip moves, with one transform a frame, so
// the entries share one layer however many there are.
export class Strip {
  constructor(el) {
    this.el = el;
    this.els = new Map(); // id -> element with the testid
    this.ghosts = []; // {el, until}: entries fading out, without the testid
    this.origin = 0; // Redis ms at left offset 0
    this.pxPerMs = 0;
    this.fanned = 0; // dots fanned out of a burst
  }

  clear() {
    this.el.replaceChildren();
    this.els.clear();
    this.ghosts = [];
    this.pxPerMs = 0;
    this.fanned = 0;
  }

  render(model, g) {
    const pxPerMs = g.width / g.span;
    let changed = false;
    if (pxPerMs !== this.pxPerMs) changed = true;
    if (changed || Math.abs(g.t - this.origin) > g.span) this.rebase(g.t, pxPerMs);
    for (const [id, el] of this.els) {
      if (!model.entries.has(id)) {
        this.retire(id, el, Number(el.dataset.ms) <= g.cutoff ? 'is-leaving' : 'is-dropped');
        changed = true;
      }
    }
    for (const [id, e] of model.entries) {
      if (!this.els.has(id)) {
        this.add(id, e);
        changed = true;
      }
    }
    if (changed) this.layout();
    const p = performance.now();
    let keep = 0;
    for (const gh of this.ghosts) {
      if (p >= gh.until) gh.el.remove();
      else this.ghosts[keep++] = gh;
    }
    this.ghosts.length = keep;
    for (const el of this.els.values()) future(el, g.t);
    const x = (this.origin - g.left) * this.pxPerMs;
    this.el.style.transform = 'translateX(' + x.toFixed(1) + 'px)';
  }

  rebase(t, pxPerMs) {
    this.origin = t;
    this.pxPerMs = pxPerMs;
    for (const el of this.els.values()) this.place(el);
    for (const gh of this.ghosts) this.place(gh.el);
  }

  place(el) {
    el.style.left = ((Number(el.dataset.ms) - this.origin) * this.pxPerMs + (el.fanDx || 0)).toFixed(1) + 'px';
  }

  // layout fans out the bursts (see fan) when the entries change; only the
  // dots whose place changes are written.
  layout() {
    const items = [];
    for (const el of this.els.values()) items.push({ el: el, ms: Number(el.dataset.ms), lane: el.lane });
    items.sort((a, b) => a.ms - b.ms);
    const places = fan(items, this.pxPerMs);
    let fanned = 0;
    for (let k = 0; k < items.length; k++) {
      const el = items[k].el;
      const p = places[k];
      const top = p.rows ? (14 + 72 * p.row / (p.rows - 1)).toFixed(2) + '%' : '';
      const packed = p.rows > LANES;
      if (p.rows) fanned++;
      if (el.fanDx !== p.dx) {
        el.fanDx = p.dx;
        this.place(el);
      }
      if (el.fanTop !== top) {
        el.fanTop = top;
        el.style.top = top;
      }
      if (el.classList.contains('is-packed') !== packed) el.classList.toggle('is-packed', packed);
    }
    this.fanned = fanned;
  }

  add(id, e) {
    const el = document.createElement('span');
    el.className = 'tl-entry lane-' + e.lane;
    el.lane = e.lane;
    el.fanDx = 0;
    el.fanTop = '';
    el.dataset.testid = 'timeline-entry';
    el.dataset.id = id;
    el.dataset.ms = String(e.ms);
    el.title = 'member ' + id + '\nscore ' + e.ms;
    el.future = null;
    this.place(el);
    this.el.appendChild(el);
    this.els.set(id, el);
  }

  // retire takes an entry out at once; what stays on screen for a moment is
  // the same element without its testid, fading.
  retire(id, el, cls) {
    this.els.delete(id);
    el.removeAttribute('data-testid');
    el.removeAttribute('data-id');
    el.classList.add(cls);
    this.ghosts.push({ el: el, until: performance.now() + GHOST_MS });
    if (this.ghosts.length > GHOSTS_MAX) this.ghosts.shift().el.remove();
  }
}
