// The timeline for the algorithms that keep no entries: one canvas
// draws, per rule, the state AlgoModel moves on to the frame's instant, as
// the algorithm's own module (algorithms/<name>.js) draws and words it with
// the helpers here. It draws at most once per animation frame (called from
// the page's frame) and only when the picture moved by a pixel or the state
// changed.

import { fmtDuration, fmtInt } from './format.js';
import { algorithm } from './algorithms.js';

const CAPTION_EVERY_MS = 500;
const TEXT_STEP_MS = 100; // countdowns on the canvas show tenths of a second
export const C = {
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
      const a = algorithm(model.algorithm);
      if (a && a.draw && r[model.algorithm]) a.draw(this, lane, r, s, t);
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
}

// ruleName names a rule on the drawing: 5 per 10 s.
export function ruleName(r) {
  return r.limit + ' per ' + fmtDuration(r.windowMs);
}

// caption says in words what the drawing shows for the longest rule.
function caption(model, t) {
  const r = model.longest();
  const a = algorithm(model.algorithm);
  if (!r || !a || !a.say || !r[model.algorithm]) return '';
  const rule = fmtInt(r.limit) + ' per ' + fmtDuration(r.windowMs);
  return a.say(r, model.at(r, t), t, rule);
}

// renderAlgoRing counts down, when not blocked, to the binding rule's
// reset: the end of a fixed window, the counter's estimate at 0, the TAT, a
// full bucket. a is the algorithm (its module), denial what blocks now.
export function renderAlgoRing(ring, algo, rule, a, t, denial) {
  const r = rule && algo.known ? algo.rule(rule.windowMs) : null;
  const s = r ? algo.at(r, t) : null;
  const W = rule ? rule.windowMs : 0;
  if (!s || s.resetAt === null) {
    ring.render(t, null, W, denial);
    return;
  }
  ring.render(t, s.resetAt - W, W, denial, (a && a.resetLabel) || 'until it resets');
}
