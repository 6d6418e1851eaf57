// The sliding-window counter: the previous aligned window's count, weighted
// by how much of it the sliding window still covers, plus the current one.
// The page draws both windows and the sliding window over them.

import { fmtDuration, fmtInt } from '../format.js';
import { C, ruleName } from '../algo-view.js';

const EPS = 1e-9; // keeps ceil() of a whole number computed in floats whole

export default {
  // at is rule r's state at t: windows roll over as the script's would.
  at(r, t) {
    const W = r.windowMs;
    let start = r.counter.windowStartMs;
    let prev = r.counter.prevCount;
    let curr = r.counter.currCount;
    if (t >= start + W) {
      const next = Math.floor(t / W) * W;
      prev = next === start + W ? curr : 0;
      curr = 0;
      start = next;
    }
    const left = W - (t - start);
    const weight = left / W;
    const resetAt = curr > 0 ? start + 2 * W : prev > 0 ? start + W : null;
    return {
      used: curr + Math.ceil(prev * left / W - EPS), resetAt: resetAt,
      start: start, prev: prev, curr: curr, weight: weight, estimate: prev * weight + curr,
    };
  },

  empty(limit, windowMs, t) {
    return { windowStartMs: Math.floor(t / windowMs) * windowMs, prevCount: 0, currCount: 0 };
  },

  draw(v, lane, r, s, t) {
    const W = r.windowMs;
    const x = v.axis(lane, t, 2 * W, W); // the previous window always fits
    const c = v.ctx;
    const full = s.used >= r.limit;
    const prev = v.windowBox(lane, x(s.start - W), x(s.start), s.prev, r.limit, C.prevSoft, C.prev);
    v.windowBox(lane, x(s.start), x(s.start + W), s.curr, r.limit, full ? C.badSoft : C.okSoft, full ? C.bad : C.ok);
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
    v.text('sliding window: prev ' + fmtInt(s.prev) + ' × ' + s.weight.toFixed(2) + ' + curr ' + fmtInt(s.curr) + ' = ' + est,
      x(t - W) + 5, prev.top + 14, full ? C.bad : C.accent, 'left', true);
    v.text('previous window', (x(s.start - W) + x(s.start)) / 2, lane.y + lane.h - 2, C.muted, 'center');
    v.text('current window', (x(s.start) + x(s.start + W)) / 2, lane.y + lane.h - 2, C.ok, 'center');
    v.nowLine(lane, x(t));
    if (lane.label) v.text(ruleName(r), lane.w - 4, lane.y + 12, C.muted, 'right');
  },

  say(r, s, t, rule) {
    const prev = s.prev === 0
      ? 'the previous window counted nothing'
      : 'its ' + fmtInt(s.prev) + ' weigh ' + (Math.round(s.prev * s.weight * 100) / 100);
    return 'Sliding-window counter (' + rule + '): the sliding window (the bracket) still covers ' + Math.round(s.weight * 100) +
      '% of the previous window; ' + prev + ', and the current one holds ' + fmtInt(s.curr) + ': ' +
      fmtInt(s.used) + ' used of ' + fmtInt(r.limit) + ' (the sum rounded up).';
  },

  resetLabel: 'until the estimate is 0',
  phrase: 'the sliding counter',
};
