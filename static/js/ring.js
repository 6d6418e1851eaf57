// The countdown ring: time until the oldest entry slides out or, after a
// 429, the Retry-After counting down to zero — or a lock, to its end.

import { fmtWait } from './wait.js';

const RING_R = 52; // the SVG circle's radius
const RING_C = 2 * Math.PI * RING_R;

export class Ring {
  constructor(ui, writer) {
    this.ui = ui; // {ring, wrap, bar, value, label}
    this.w = writer;
    this.offset = '';
    ui.bar.style.strokeDasharray = RING_C.toFixed(2);
    ui.bar.style.strokeDashoffset = RING_C.toFixed(2);
  }

  // render shows the denial's countdown while blocked (denial = {retryAt,
  // total, locked} in Redis ms; locked: a lock's), else the time until
  // oldest + windowMs, labelled idleLabel when the algorithm counts down to
  // something else (its reset).
  render(t, oldest, windowMs, denial, idleLabel) {
    let remaining = 0;
    let total = windowMs || 1;
    let mode = 'is-idle';
    let label = 'window empty';
    if (denial && denial.retryAt > t) {
      remaining = denial.retryAt - t;
      total = Math.max(denial.total, 1);
      mode = denial.locked ? 'is-blocked is-locked' : 'is-blocked';
      label = denial.locked ? 'locked' : 'until allowed';
    } else if (oldest !== null) {
      remaining = Math.max(0, oldest + windowMs - t);
      mode = 'is-counting';
      label = idleLabel || 'until the oldest slides out';
    }
    const ms = Math.max(0, Math.round(remaining));
    this.w.attr(this.ui.ring, 'data-remaining-ms', String(ms));
    const secs = fmtWait(ms).slice(0, -2); // as the waits of "Try it" read
    this.w.text(this.ui.value, secs + ' s');
    this.w.cls(this.ui.value, 'ring-value' + (secs.length > 7 ? ' is-longer' : secs.length > 5 ? ' is-long' : ''));
    this.w.text(this.ui.label, label);
    this.w.cls(this.ui.wrap, 'ring-wrap ' + mode);
    const frac = Math.min(1, Math.max(0, remaining / total));
    // Half a unit of the 120-unit viewBox is under a pixel: finer steps would
    // repaint the ring every frame for nothing.
    const offset = (Math.round(2 * RING_C * (1 - frac)) / 2).toFixed(1);
    if (offset !== this.offset) {
      this.offset = offset;
      this.ui.bar.style.strokeDashoffset = offset;
    }
  }
}
