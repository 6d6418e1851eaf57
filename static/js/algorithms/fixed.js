// The fixed window: one counter per window aligned on Redis's clock. The
// page draws the current window filling up and the edge where it starts
// again from 0.

import { fmtDuration, fmtInt } from '../format.js';
import { C, ruleName } from '../algo-view.js';

export default {
  // at is rule r's state at t: a window that has ended starts from 0.
  at(r, t) {
    const W = r.windowMs;
    let start = r.fixed.windowStartMs;
    let count = r.fixed.count;
    if (t >= start + W) {
      start = Math.floor(t / W) * W;
      count = 0;
    }
    return { used: count, resetAt: count > 0 ? start + W : null, start: start, count: count };
  },

  // empty is the state of a fresh key at t.
  empty(limit, windowMs, t) {
    return { windowStartMs: Math.floor(t / windowMs) * windowMs, count: 0 };
  },

  draw(v, lane, r, s, t) {
    const W = r.windowMs;
    const x = v.axis(lane, t, W, W);
    const full = s.count >= r.limit;
    v.windowBox(lane, x(s.start - W), x(s.start), 0, r.limit, C.prevSoft, C.line);
    const box = v.windowBox(lane, x(s.start), x(s.start + W), s.count, r.limit, full ? C.badSoft : C.okSoft, full ? C.bad : C.ok);
    const edge = x(s.start + W);
    const c = v.ctx;
    c.setLineDash([5, 4]);
    c.strokeStyle = C.bad;
    c.lineWidth = 2;
    c.beginPath();
    c.moveTo(edge, lane.y + 4);
    c.lineTo(edge, lane.y + lane.h - 4);
    c.stroke();
    c.setLineDash([]);
    v.text('resets to 0 in ' + fmtDuration(s.start + W - t), Math.min(edge - 4, lane.w - 4), lane.y + 13, C.bad, 'right', true);
    v.text(fmtInt(s.count) + ' / ' + fmtInt(r.limit) + ' this window', x(s.start) + 6, box.top + 14, full ? C.bad : C.ok, 'left', true);
    v.nowLine(lane, x(t));
    if (lane.label) v.text(ruleName(r), lane.x + 4, lane.y + 13, C.muted);
  },

  say(r, s, t, rule) {
    return 'Fixed window (' + rule + '): ' + fmtInt(s.count) + ' counted since this window began; at the dashed edge, in ' +
      fmtDuration(s.start + r.windowMs - t) + ', the count starts again from 0.';
  },

  resetLabel: 'until the window resets',
  phrase: 'fixed window',
  // overNote explains, in the lab, why it let more than the limit through a
  // window; strong notes win over the busiest algorithm's.
  overNote(traffic) {
    return traffic === 'boundary'
      ? { text: 'the burst before the edge and the one after it count in different fixed windows', strong: true }
      : null;
  },
};
