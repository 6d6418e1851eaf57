// The timeline for the algorithms that keep no entries: one canvas
// draws, per rule, the state AlgoModel moves on to the frame's instant —
//   fixed    the current aligned window with its count filling up, and the
//            edge where it starts again from 0;
//   counter  the previous and current windows, the sliding window over
//            them and the previous one's weight;
//   gcra     the TAT ahead of now inside the one-window burst allowance;
//   bucket   the level of tokens refilling towards the capacity.
// It draws at most once per animation frame (called from the page's frame)
// and only when the picture moved by a pixel or the state changed.

import { fmtDuration, fmtInt } from './format.js';

const CAPTION_EVERY_MS = 500;
const TEXT_STEP_MS = 100; // countdowns on the canvas show tenths of a second
const C = {
  ok: '#16a34a',
  okSoft: 'rgba(22, 163, 74, 0.16)',
  bad: '#dc2626',
  badSoft: 'rgba(220, 38, 38, 0.14)',
  accent: '#4338ca',
  accentSoft: 'rgba(67, 56, 202, 0.10)',
  prev: '#8a94a8',
  prevSoft: 'rgba(138, 148, 168, 0.22)',
  line: '#cfd5e2',
  text: '#172033',
  muted: '#5a667c',
  warn: '#d97706',
  warnSoft: 'rgba(217, 119, 6, 0.18)',
};

export class AlgoView {
  constructor(ui, writer) {
    this.ui = ui; // {timeline, plot, canvas, caption}
    this.w = writer;
    this.ctx = ui.canvas.getContext('2d');
    this.width = 0;
    this.height = 0;
    this.drawnKey = '';
    this.captionAt = -Infinity;
    const measure = () => {
      const dpr = window.devicePixelRatio || 1;
      this.width = ui.plot.clientWidth;
      this.height = ui.plot.clientHeight;
      ui.canvas.width = Math.max(1, Math.round(this.width * dpr));
      ui.canvas.height = Math.max(1, Math.round(this.height * dpr));
      this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      this.drawnKey = '';
    };
    measure();
    if ('ResizeObserver' in window) new ResizeObserver(measure).observe(ui.plot);
    else window.addEventListener('resize', measure);
  }

  clear() {
    this.ctx.clearRect(0, 0, this.width, this.height);
    this.drawnKey = '';
    this.captionAt = -Infinity;
  }

  render(model, t) {
    if (!model.known || this.width <= 0) return;
    const count = model.count(t);
    this.w.attr(this.ui.timeline, 'data-count', String(count === null ? 0 : count));
    const rules = model.rules;
    // Redraw when the picture moves by about a pixel, the state changes, or
    // the countdowns it writes (to a tenth of a second) would.
    const shortest = rules.reduce((m, r) => Math.min(m, r.windowMs), Infinity);
    const px = Math.floor(2 * shortest / Math.max(1, this.width * (window.devicePixelRatio || 1)));
    const step = Math.max(1, Math.min(TEXT_STEP_MS, px));
    const key = model.version + ':' + Math.floor(t / step);
    if (key !== this.drawnKey) {
      this.drawnKey = key;
      this.draw(model, t);
    }
    // The words follow the clock a few times a second, and a new state at once.
    const p = performance.now();
    if (p - this.captionAt >= CAPTION_EVERY_MS || model.version !== this.captionVersion) {
      this.captionAt = p;
      this.captionVersion = model.version;
      this.w.text(this.ui.caption, caption(model, t));
    }
  }

  draw(model, t) {
    const c = this.ctx;
    c.clearRect(0, 0, this.width, this.height);
    const rules = model.rules;
    const laneH = this.height / Math.max(1, rules.length);
    rules.forEach((r, i) => {
      const lane = { x: 0, y: i * laneH, w: this.width, h: laneH, label: rules.length > 1 };
      const s = model.at(r, t);
      if (r.fixed) this.fixed(lane, r, s, t);
      else if (r.counter) this.counter(lane, r, s, t);
      else if (r.gcra) this.gcra(lane, r, s, t);
      else if (r.bucket) this.bucket(lane, r, s, t);
      if (i > 0) {
        c.fillStyle = C.line;
        c.fillRect(0, lane.y, this.width, 1);
      }
    });
  }

  // axis maps [t − before, t + after] onto the lane's width.
  axis(lane, t, before, after) {
    return (ms) => lane.x + (ms - (t - before)) / (before + after) * lane.w;
  }

  nowLine(lane, x) {
    const c = this.ctx;
    c.fillStyle = C.accent;
    c.fillRect(Math.round(x) - 1, lane.y + 4, 2, lane.h - 8);
    this.text('now', x + 4, lane.y + lane.h - 8, C.accent, 'left', true);
  }

  text(s, x, y, color, align, bold) {
    const c = this.ctx;
    c.font = (bold ? '600 ' : '') + '11px system-ui, sans-serif';
    c.fillStyle = color;
    c.textAlign = 'left';
    c.textBaseline = 'alphabetic';
    // Aligned as asked, but kept inside the canvas.
    const w = c.measureText(s).width;
    let left = align === 'right' ? x - w : align === 'center' ? x - w / 2 : x;
    left = Math.max(2, Math.min(left, this.width - w - 2));
    c.fillText(s, left, y);
  }

  // windowBox draws an aligned window [a, a+W] filled from the bottom to
  // n / limit of the lane's height.
  windowBox(lane, x0, x1, n, limit, fill, stroke) {
    const c = this.ctx;
    const top = lane.y + 18;
    const h = lane.h - 32;
    c.strokeStyle = stroke;
    c.lineWidth = 1;
    c.strokeRect(Math.round(x0) + 0.5, top + 0.5, Math.max(1, x1 - x0 - 1), h);
    const f = Math.min(1, Math.max(0, n / limit));
    if (f > 0) {
      c.fillStyle = fill;
      c.fillRect(x0 + 1, top + h * (1 - f), Math.max(1, x1 - x0 - 2), h * f);
    }
    return { top: top, h: h };
  }

  fixed(lane, r, s, t) {
    const W = r.windowMs;
    const x = this.axis(lane, t, W, W);
    const full = s.count >= r.limit;
    this.windowBox(lane, x(s.start - W), x(s.start), 0, r.limit, C.prevSoft, C.line);
    const box = this.windowBox(lane, x(s.start), x(s.start + W), s.count, r.limit, full ? C.badSoft : C.okSoft, full ? C.bad : C.ok);
    const edge = x(s.start + W);
    const c = this.ctx;
    c.setLineDash([5, 4]);
    c.strokeStyle = C.bad;
    c.lineWidth = 2;
    c.beginPath();
    c.moveTo(edge, lane.y + 4);
    c.lineTo(edge, lane.y + lane.h - 4);
    c.stroke();
    c.setLineDash([]);
    this.text('resets to 0 in ' + fmtDuration(s.start + W - t), Math.min(edge - 4, lane.w - 4), lane.y + 13, C.bad, 'right', true);
    this.text(fmtInt(s.count) + ' / ' + fmtInt(r.limit) + ' this window', x(s.start) + 6, box.top + 14, full ? C.bad : C.ok, 'left', true);
    this.nowLine(lane, x(t));
    if (lane.label) this.text(ruleName(r), lane.x + 4, lane.y + 13, C.muted);
  }

  counter(lane, r, s, t) {
    const W = r.windowMs;
    const x = this.axis(lane, t, 2 * W, W); // the previous window always fits
    const c = this.ctx;
    const full = s.used >= r.limit;
    const prev = this.windowBox(lane, x(s.start - W), x(s.start), s.prev, r.limit, C.prevSoft, C.prev);
    this.windowBox(lane, x(s.start), x(s.start + W), s.curr, r.limit, full ? C.badSoft : C.okSoft, full ? C.bad : C.ok);
    // The part of the previous window that the sliding window [t − W, t]
    // still covers is the weight: that part of its count is what counts.
    const f = Math.min(1, s.prev / r.limit);
    if (f > 0) {
      c.fillStyle = 'rgba(67, 56, 202, 0.35)';
      c.fillRect(x(t - W), prev.top + prev.h * (1 - f), x(s.start) - x(t - W), prev.h * f);
    }
    // The sliding window as a bracket above the two windows.
    const y = lane.y + 9;
    c.strokeStyle = C.accent;
    c.lineWidth = 2;
    c.beginPath();
    c.moveTo(x(t - W), y + 6);
    c.lineTo(x(t - W), y);
    c.lineTo(x(t), y);
    c.stroke();
    c.setLineDash([3, 3]);
    c.lineWidth = 1;
    c.beginPath();
    c.moveTo(x(t - W), y);
    c.lineTo(x(t - W), lane.y + lane.h - 12);
    c.stroke();
    c.setLineDash([]);
    const est = Math.round(s.estimate * 100) / 100;
    this.text('sliding window: prev ' + fmtInt(s.prev) + ' × ' + s.weight.toFixed(2) + ' + curr ' + fmtInt(s.curr) + ' = ' + est,
      x(t - W) + 5, prev.top + 14, full ? C.bad : C.accent, 'left', true);
    this.text('previous window', (x(s.start - W) + x(s.start)) / 2, lane.y + lane.h - 2, C.muted, 'center');
    this.text('current window', (x(s.start) + x(s.start + W)) / 2, lane.y + lane.h - 2, C.ok, 'center');
    this.nowLine(lane, x(t));
    if (lane.label) this.text(ruleName(r), lane.w - 4, lane.y + 12, C.muted, 'right');
  }

  gcra(lane, r, s, t) {
    const W = r.windowMs;
    const x = this.axis(lane, t, 0.1 * W, 1.05 * W);
    const c = this.ctx;
    const top = lane.y + 18;
    const h = lane.h - 32;
    // The burst allowance: a request fits while the TAT stays within one
    // window of now; the TAT's lead over now is what is used of it.
    c.fillStyle = C.accentSoft;
    c.fillRect(x(t), top, x(t + W) - x(t), h);
    c.strokeStyle = C.accent;
    c.lineWidth = 1;
    c.strokeRect(x(t), top + 0.5, x(t + W) - x(t), h);
    const full = s.remaining <= 0;
    if (s.tat > t) {
      c.fillStyle = full ? C.badSoft : C.warnSoft;
      c.fillRect(x(t), top, x(s.tat) - x(t), h);
    }
    // One slot per emission interval after the TAT: the requests that fit now.
    c.fillStyle = C.ok;
    const slotW = Math.max(1, x(t + s.interval) - x(t));
    for (let i = 0; i < s.remaining && i < 400; i++) {
      const a = x(s.tat + i * s.interval);
      if (slotW >= 5) c.fillRect(a + 1.5, top + h - 10, slotW - 3, 6);
    }
    const tx = x(s.tat);
    c.fillStyle = full ? C.bad : C.warn;
    c.fillRect(Math.round(tx) - 1, lane.y + 6, 3, lane.h - 14);
    const lead = s.tat - t;
    this.text('TAT ' + (lead > 0 ? '+' + fmtDuration(lead) : '= now'), tx + 6, lane.y + 14, full ? C.bad : C.warn, 'left', true);
    this.text(fmtInt(s.remaining) + ' of ' + fmtInt(r.limit) + ' fit now · one every ' + fmtDuration(s.interval),
      x(t) + 6, top + h / 2 + 4, full ? C.bad : C.text, 'left', true);
    this.text('now + window', x(t + W) - 4, lane.y + lane.h - 4, C.accent, 'right');
    this.nowLine(lane, x(t));
    if (lane.label) this.text(ruleName(r), x(t + W / 2), lane.y + lane.h - 4, C.muted, 'center');
  }

  bucket(lane, r, s, t) {
    const c = this.ctx;
    const L = r.limit;
    const pad = 14;
    const x0 = lane.x + pad;
    const w = lane.w - 2 * pad;
    const top = lane.y + 22;
    const h = Math.max(12, lane.h - 44);
    c.fillStyle = '#ffffff';
    c.fillRect(x0, top, w, h);
    const f = Math.min(1, Math.max(0, s.tokens / L));
    const whole = Math.floor(s.tokens + 1e-9);
    c.fillStyle = whole < 1 ? C.badSoft : C.okSoft;
    c.fillRect(x0, top, w * f, h);
    c.fillStyle = whole < 1 ? C.bad : C.ok;
    c.fillRect(x0 + w * f - 2, top, 2, h);
    if (L <= 60) {
      c.fillStyle = C.line;
      for (let i = 1; i < L; i++) c.fillRect(Math.round(x0 + w * i / L), top, 1, h);
    }
    c.strokeStyle = C.prev;
    c.lineWidth = 1.5;
    c.strokeRect(x0, top, w, h);
    const tokens = s.tokens >= L ? String(L) : s.tokens.toFixed(2);
    this.text(tokens + ' / ' + fmtInt(L) + ' tokens', x0, lane.y + 15, whole < 1 ? C.bad : C.ok, 'left', true);
    const refill = '+1 token every ' + fmtDuration(r.windowMs / L) +
      (s.resetAt !== null ? ' · full in ' + fmtDuration(Math.max(0, s.resetAt - t)) : ' · full');
    this.text(refill, x0 + w, lane.y + 15, C.muted, 'right');
    this.text('empty', x0, top + h + 13, C.muted, 'left');
    this.text('capacity ' + fmtInt(L), x0 + w, top + h + 13, C.muted, 'right');
  }
}

function ruleName(r) {
  return r.limit + ' per ' + fmtDuration(r.windowMs);
}

// caption says in words what the drawing shows for the longest rule.
function caption(model, t) {
  const r = model.longest();
  if (!r) return '';
  const s = model.at(r, t);
  const rule = fmtInt(r.limit) + ' per ' + fmtDuration(r.windowMs);
  if (r.fixed) {
    return 'Fixed window (' + rule + '): ' + fmtInt(s.count) + ' counted since this window began; at the dashed edge, in ' +
      fmtDuration(s.start + r.windowMs - t) + ', the count starts again from 0.';
  }
  if (r.counter) {
    const prev = s.prev === 0
      ? 'the previous window counted nothing'
      : 'its ' + fmtInt(s.prev) + ' weigh ' + (Math.round(s.prev * s.weight * 100) / 100);
    return 'Sliding-window counter (' + rule + '): the sliding window (the bracket) still covers ' + Math.round(s.weight * 100) +
      '% of the previous window; ' + prev + ', and the current one holds ' + fmtInt(s.curr) + ': ' +
      fmtInt(s.used) + ' used of ' + fmtInt(r.limit) + ' (the sum rounded up).';
  }
  if (r.gcra) {
    const lead = s.tat - t;
    return 'GCRA (' + rule + '): each request pushes the TAT on by ' + fmtDuration(s.interval) + '; it is ' +
      (lead > 0 ? fmtDuration(lead) + ' ahead of now' : 'at now') + ', so ' + fmtInt(s.remaining) +
      ' of the burst of ' + fmtInt(r.limit) + ' fit now.';
  }
  if (r.bucket) {
    return 'Token bucket (' + rule + '): ' + s.tokens.toFixed(2) + ' tokens, refilling by one every ' +
      fmtDuration(r.windowMs / r.limit) + '; a request takes one per unit of cost.';
  }
  return '';
}
