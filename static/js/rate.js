// The window's traffic: allowed and denied checks per second (the last whole
// second of Redis time) and a sparkline of the last 60 s. Each decision adds
// to its second's bucket; the frame draws at most every REDRAW_MS. A shadow
// policy's would-deny counts as denied (the page shows what the
// limit would do), and the text and bars say how many of those were shadow.

import { OUTCOME, decisionOutcome } from './messages.js';
import { fmtInt } from './format.js';

const SECONDS = 60;
const RING = 64; // > SECONDS, so the second being filled never overwrites one drawn
const REDRAW_MS = 250;

export class Rate {
  constructor(ui, writer) {
    this.ui = ui; // {root, text, canvas}
    this.w = writer;
    this.sec = new Float64Array(RING).fill(-1); // which second each slot holds
    this.allowed = new Uint32Array(RING);
    this.denied = new Uint32Array(RING);
    this.wouldDeny = new Uint32Array(RING);
    this.dirty = true;
    this.drawnSec = -1;
    this.drawnAt = -Infinity;
    this.width = 0;
    this.height = 0;
    this.ctx = ui.canvas.getContext('2d');
    const measure = () => {
      const dpr = window.devicePixelRatio || 1;
      const w = Math.max(1, Math.round(ui.canvas.clientWidth * dpr));
      const h = Math.max(1, Math.round(ui.canvas.clientHeight * dpr));
      if (w === ui.canvas.width && h === ui.canvas.height) return;
      this.width = ui.canvas.clientWidth;
      this.height = ui.canvas.clientHeight;
      ui.canvas.width = w; // clears it: draw again at the next frame
      ui.canvas.height = h;
      this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      this.dirty = true;
      this.drawnAt = -Infinity;
    };
    measure();
    if ('ResizeObserver' in window) new ResizeObserver(measure).observe(ui.canvas);
  }

  clear() {
    this.sec.fill(-1);
    this.dirty = true;
  }

  decision(m) {
    if (typeof m.nowMs !== 'number') return;
    const s = Math.floor(m.nowMs / 1000);
    const i = s % RING;
    if (this.sec[i] !== s) {
      if (this.sec[i] > s) return; // older than anything kept
      this.sec[i] = s;
      this.allowed[i] = 0;
      this.denied[i] = 0;
      this.wouldDeny[i] = 0;
    }
    const o = decisionOutcome(m);
    if (o === OUTCOME.ALLOWED) this.allowed[i]++;
    else {
      this.denied[i]++;
      if (o === OUTCOME.WOULD_DENY) this.wouldDeny[i]++;
    }
    this.dirty = true;
  }

  at(counts, s) {
    const i = s % RING;
    return this.sec[i] === s ? counts[i] : 0;
  }

  render(t) {
    const last = Math.floor(t / 1000) - 1; // the last whole second
    const p = performance.now();
    if (last === this.drawnSec && !(this.dirty && p - this.drawnAt >= REDRAW_MS)) return;
    this.drawnSec = last;
    this.drawnAt = p;
    this.dirty = false;
    const a = this.at(this.allowed, last);
    const d = this.at(this.denied, last);
    this.w.attr(this.ui.root, 'data-allowed', String(a));
    this.w.attr(this.ui.root, 'data-denied', String(d));
    const wd = this.at(this.wouldDeny, last);
    this.w.attr(this.ui.root, 'data-would-deny', String(wd));
    let text = fmtInt(a) + '/s allowed · ' + fmtInt(d) + '/s denied';
    if (wd > 0) text += ' (' + fmtInt(wd) + ' would deny · shadow)';
    this.w.text(this.ui.text, text);
    this.draw(last);
  }

  // draw stacks each second's allowed (green) and denied (red; the shadow
  // would-denies among them amber) checks as a bar, oldest left, scaled to
  // the busiest second shown.
  draw(last) {
    const c = this.ctx;
    const W = this.width;
    const H = this.height;
    c.clearRect(0, 0, W, H);
    let max = 0;
    for (let s = last - SECONDS + 1; s <= last; s++) {
      max = Math.max(max, this.at(this.allowed, s) + this.at(this.denied, s));
    }
    c.fillStyle = '#e5e9f2';
    c.fillRect(0, H - 1, W, 1);
    if (max === 0) return;
    const bw = W / SECONDS;
    for (let j = 0; j < SECONDS; j++) {
      const s = last - SECONDS + 1 + j;
      const a = this.at(this.allowed, s);
      const d = this.at(this.denied, s);
      if (a + d === 0) continue;
      const x = j * bw;
      const w = Math.max(1, bw - 1);
      const ha = a / max * (H - 2);
      const hd = d / max * (H - 2);
      c.fillStyle = '#16a34a';
      c.fillRect(x, H - 1 - ha, w, ha);
      const hw = this.at(this.wouldDeny, s) / max * (H - 2);
      c.fillStyle = '#dc2626';
      c.fillRect(x, H - 1 - ha - hd, w, hd - hw);
      if (hw > 0) {
        c.fillStyle = '#d97706';
        c.fillRect(x, H - 1 - ha - hw, w, hw);
      }
    }
  }
}
