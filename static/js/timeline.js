// The timeline: the window's entries placed by score over 1.2 windows, the
// cutoff at now − window. Up to DOM_MAX entries each is an element
// (`timeline-entry`) in one strip that moves with one transform; beyond, one
// canvas draws them as dots while every entry is known, or as a density band.
// A booked check's entry is scored at its slot, after now: while one waits,
// the axis goes on right of the now line to the latest booking (and a
// little), and the entry slides into the window when its time comes.

import { SPAN } from './window-model.js';
import { Strip } from './strip.js';
import { fmtInt, fmtDuration, fmtClock } from './format.js';

export const DOM_MAX = 200;
const CAPTION_EVERY_MS = 500; // a caption that changed every frame could not be read
const MIN_COLUMN_PX = 2; // bins narrower than this are drawn together
const REDRAW_MS = 33; // new data alone redraws the canvas at most this often
const FUTURE_STEP = 0.1; // room right of now grows and shrinks in steps of this many windows

// laneY is the vertical place of a lane, as a fraction of the plot's height.
function laneY(lane) {
  return 0.14 + 0.12 * lane;
}

export class Timeline {
  constructor(ui, writer) {
    this.ui = ui; // {timeline, cutoff, plot, strip, canvas, caption, axisStart, axisEnd}
    this.w = writer;
    this.strip = new Strip(ui.strip);
    this.plot = new Plot(ui.canvas);
    this.mode = ''; // 'dom', 'dots' or 'band'
    this.width = 0;
    this.height = 0;
    this.captionAt = -Infinity;
    this.captionKind = ''; // what the caption last said, in short: see render
    this.windowMs = 0;
    this.futureMs = null; // room right of now, as last laid out
    const measure = () => {
      this.width = ui.plot.clientWidth;
      this.height = ui.plot.clientHeight;
      this.plot.size(this.width, this.height);
    };
    measure();
    if ('ResizeObserver' in window) new ResizeObserver(measure).observe(ui.plot);
    else window.addEventListener('resize', measure);
  }

  // clear empties the drawing (another window is watched).
  clear() {
    this.strip.clear();
    this.plot.clear();
    this.mode = '';
    this.captionAt = -Infinity;
    this.futureMs = null;
    this.w.attr(this.ui.timeline, 'data-count', '0');
    this.w.text(this.ui.caption, '');
  }

  render(model, t) {
    const W = model.windowMs;
    if (!(W > 0)) return;
    if (W !== this.windowMs) {
      this.windowMs = W;
      this.w.text(this.ui.axisStart, '−' + fmtDuration(SPAN * W));
      this.strip.clear();
    }
    const count = model.count(t);
    const inWindow = model.exact ? model.entries.size : count;
    let mode = 'band';
    if (!model.known || (model.exact && inWindow <= DOM_MAX)) mode = 'dom';
    else if (model.exact) mode = 'dots';
    if (mode !== this.mode) {
      if (this.mode === 'dom') this.strip.clear();
      if (mode === 'dom') this.plot.clear();
      this.ui.timeline.dataset.mode = mode;
      this.mode = mode;
      this.captionAt = -Infinity;
    }
    this.w.attr(this.ui.timeline, 'data-count', String(count === null ? 0 : count));
    this.w.attr(this.ui.cutoff, 'data-ms', String(Math.floor(t - W)));

    const past = SPAN * W;
    const future = this.future(model, t, W);
    const geo = { t: t, left: t - past, span: past + future, cutoff: t - W, width: this.width, height: this.height };
    let d = null;
    if (mode === 'dom') this.strip.render(model, geo);
    else if (this.plot.due(model, geo)) {
      if (mode === 'dots') this.plot.dots(model, geo);
      else {
        d = model.density(t);
        this.plot.band(model, geo, d);
      }
    }
    // A caption that changed every frame could not be read, so a busy one
    // keeps still for a while; one of entries drawn one by one changes with
    // them, so it never names another count than the dots beside it.
    const fanned = mode === 'dom' ? this.strip.fanned : 0;
    let booked = 0;
    if (future > 0 && model.exact) for (const e of model.entries.values()) if (e.ms > t) booked++;
    const kind = mode === 'dom' ? count + ' ' + fanned + ' ' + booked : mode + (count ? '' : ' empty') + booked;
    const p = performance.now();
    if (p - this.captionAt >= CAPTION_EVERY_MS || kind !== this.captionKind) {
      this.captionAt = p;
      this.captionKind = kind;
      if (mode === 'band' && !d) d = model.density(t);
      let text = model.known ? caption(mode, model, count, d, fanned) : '';
      if (booked > 0) {
        text += booked === 1
          ? ' 1 is booked: a check waiting for its slot, scored right of the now line; it slides into the window when the clock gets there.'
          : ' ' + fmtInt(booked) + ' are booked: checks waiting for their slots, scored right of the now line; they slide into the window when the clock gets there.';
      }
      this.w.text(this.ui.caption, text);
    }
  }

  // future is the room the axis keeps right of now: none while no booking
  // waits, else up to the latest booking and a step more. It changes in steps,
  // and the cutoff, the now line and the axis move with it (CSS variables on
  // the card: --tl-cut and --tl-now, fractions of the plot's width).
  future(model, t, W) {
    const step = FUTURE_STEP * W;
    const ahead = model.newestMs !== null && model.newestMs > t ? model.newestMs - t : 0;
    let f = this.futureMs === null ? 0 : this.futureMs;
    if (ahead === 0) f = 0;
    else if (ahead + step / 2 > f || ahead + 3 * step < f) f = Math.ceil(ahead / step + 1) * step;
    if (f !== this.futureMs) {
      this.futureMs = f;
      const span = SPAN * W + f;
      const card = this.ui.timeline.parentElement;
      card.style.setProperty('--tl-cut', ((SPAN - 1) * W / span * 100).toFixed(3) + '%');
      card.style.setProperty('--tl-now', (SPAN * W / span * 100).toFixed(3) + '%');
      card.classList.toggle('has-future', f > 0);
      if (this.ui.axisEnd) this.w.text(this.ui.axisEnd, f > 0 ? '+' + fmtDuration(f) : '');
      this.plot.clear();
    }
    return f;
  }
}

// caption says exactly what the timeline draws.
function caption(mode, model, count, d, fanned) {
  const n = count === null ? 0 : count;
  const entries = (k) => fmtInt(k) + (Math.round(k) === 1 ? ' entry' : ' entries');
  if (mode === 'dom') {
    if (n === 0) return 'The window is empty.';
    const s = entries(n) + ' in the window, each drawn as a dot at its score';
    if (!fanned) return s + '.';
    return s + '; ' + fmtInt(fanned) + ' scored within a few milliseconds of each other fan out to the left of the newest, so every one shows.';
  }
  if (mode === 'dots') return entries(n) + ' in the window, each drawn as a dot at its score, on one canvas.';
  let s = entries(n) + ' in the window, too many for dots: the band\'s thickness is the count per ' +
    fmtDuration(model.binMs) + '. Drawn: ';
  const parts = [];
  if (d.listed > 0) parts.push('the oldest ' + fmtInt(d.listed) + ', as Redis listed them');
  if (d.seen > 0) parts.push(fmtInt(d.seen) + ' recorded while this tab watched');
  if (d.unplaced > 0 && d.gap) {
    parts.push(fmtInt(d.unplaced) + ' that no message placed, spread evenly from ' +
      fmtClock(d.gap.lo) + ' to ' + fmtClock(d.gap.hi) + ' (hatched)');
  }
  if (parts.length === 0) s += 'none placed yet';
  else if (parts.length === 1) s += parts[0];
  else s += parts.slice(0, -1).join(', ') + ' and ' + parts[parts.length - 1];
  if (d.unplaced > 0 && !d.gap) s += '; ' + fmtInt(d.unplaced) + ' more are counted but not placed';
  return s + '.';
}

// Plot draws on one canvas, scaled for the screen's pixel ratio.
class Plot {
  constructor(canvas) {
    this.canvas = canvas;
    this.ctx = canvas.getContext('2d');
    this.width = 0;
    this.height = 0;
    this.scale = 1; // entries per bin at full thickness, eased so the band does not jump
    this.hatch = null;
    this.drawn = false;
    this.drawnPx = NaN; // where the last drawing had the span start, in device pixels
    this.drawnVersion = -1;
    this.drawnAt = -Infinity;
  }

  // due reports whether a redraw would change what is on screen: the plot
  // moved by a device pixel, or new data arrived (at most every REDRAW_MS).
  // A 1-minute window moves about 10 px a second, so most frames need none.
  due(model, g) {
    const dpr = window.devicePixelRatio || 1;
    const px = Math.floor(g.left / g.span * g.width * dpr);
    const p = performance.now();
    const data = model.version !== this.drawnVersion && p - this.drawnAt >= REDRAW_MS;
    if (px === this.drawnPx && !data && this.drawn) return false;
    this.drawnPx = px;
    this.drawnVersion = model.version;
    this.drawnAt = p;
    return true;
  }

  size(width, height) {
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(width * dpr));
    const h = Math.max(1, Math.round(height * dpr));
    this.width = width;
    this.height = height;
    if (w === this.canvas.width && h === this.canvas.height) return;
    this.canvas.width = w;
    this.canvas.height = h;
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.drawn = false; // resizing cleared it: the next frame redraws
  }

  clear() {
    if (!this.drawn) return;
    this.ctx.clearRect(0, 0, this.width, this.height);
    this.drawn = false;
  }

  x(ms, g) {
    return (ms - g.left) / g.span * g.width;
  }

  dots(model, g) {
    const c = this.ctx;
    this.clear();
    this.drawn = true;
    const r = model.entries.size > 600 ? 3.5 : 5;
    c.beginPath();
    for (const e of model.entries.values()) {
      const x = this.x(e.ms, g);
      const y = laneY(e.lane) * g.height;
      c.moveTo(x + r, y);
      c.arc(x, y, r, 0, 2 * Math.PI);
    }
    c.fillStyle = '#16a34a';
    c.fill();
    c.lineWidth = 1.5;
    c.strokeStyle = '#ffffff';
    c.stroke();
  }

  // band draws each bin as a column centred on the plot's middle, as thick
  // as the entries it holds: solid for placed entries (grey once they left
  // the window), hatched for the ones only counted.
  band(model, g, d) {
    const c = this.ctx;
    this.clear();
    this.drawn = true;
    const binPx = model.binMs / g.span * g.width;
    const group = Math.max(1, Math.ceil(MIN_COLUMN_PX / binPx)); // bins per column
    const colMs = group * model.binMs;
    const first = Math.floor(g.left / colMs);
    const last = Math.floor(g.t / colMs);
    const cols = [];
    let max = 0;
    for (let j = first; j <= last; j++) {
      let placed = 0;
      let est = 0;
      for (let k = j * group; k < (j + 1) * group; k++) {
        placed += model.knownAt(k);
        est += model.estimateAt(k, d);
      }
      cols.push(placed, est);
      if (placed + est > max) max = placed + est;
    }
    // Ease the scale towards the tallest column: up at once, down slowly.
    if (max > this.scale) this.scale = max;
    else this.scale = Math.max(1, this.scale + (max - this.scale) * 0.05);

    const mid = g.height / 2;
    const half = g.height * 0.42;
    const colPx = colMs / g.span * g.width;
    const cutX = this.x(g.cutoff, g);
    c.fillStyle = '#e5e9f2';
    c.fillRect(0, mid - 0.5, g.width, 1);
    for (let i = 0, j = first; j <= last; i += 2, j++) {
      const placed = cols[i];
      const est = cols[i + 1];
      if (placed + est <= 0) continue;
      const x = this.x(j * colMs, g);
      const w = Math.max(1, colPx - (colPx > 3 ? 0.5 : 0));
      const hAll = Math.max(1, (placed + est) / this.scale * half);
      if (est > 0) {
        c.fillStyle = this.hatchPattern();
        c.fillRect(x, mid - hAll, w, 2 * hAll);
      }
      if (placed > 0) {
        const h = Math.max(1, placed / this.scale * half);
        c.fillStyle = x + w <= cutX ? '#b4bccb' : '#16a34a';
        c.fillRect(x, mid - h, w, 2 * h);
      }
    }
  }

  hatchPattern() {
    if (this.hatch) return this.hatch;
    const p = document.createElement('canvas');
    p.width = 6;
    p.height = 6;
    const c = p.getContext('2d');
    c.fillStyle = 'rgba(22, 163, 74, 0.16)';
    c.fillRect(0, 0, 6, 6);
    c.strokeStyle = 'rgba(22, 163, 74, 0.55)';
    c.lineWidth = 1.2;
    c.beginPath();
    c.moveTo(0, 6);
    c.lineTo(6, 0);
    c.moveTo(-1, 1);
    c.lineTo(1, -1);
    c.moveTo(5, 7);
    c.lineTo(7, 5);
    c.stroke();
    this.hatch = this.ctx.createPattern(p, 'repeat');
    return this.hatch;
  }
}
