// GCRA: one timestamp, the theoretical arrival time (TAT). The page draws
// the burst allowance ahead of now and the TAT inside it.

import { fmtDuration, fmtInt } from '../format.js';
import { C, ruleName } from '../algo-view.js';

const EPS = 1e-9; // keeps floor() of a whole number computed in floats whole

export default {
  // at is rule r's state at t: the TAT never lies before now.
  at(r, t) {
    const W = r.windowMs;
    const L = r.limit;
    const tat = Math.max(r.gcra.tatMs, t);
    const T = r.gcra.emissionIntervalMs > 0 ? r.gcra.emissionIntervalMs : W / L;
    const remaining = Math.max(0, Math.floor((W - (tat - t)) * L / W + EPS));
    return { used: L - remaining, resetAt: tat > t ? tat : null, tat: tat, interval: T, remaining: remaining };
  },

  empty(limit, windowMs, t) {
    return { tatMs: t, emissionIntervalMs: windowMs / limit };
  },

  draw(v, lane, r, s, t) {
    const W = r.windowMs;
    const x = v.axis(lane, t, 0.1 * W, 1.05 * W);
    const c = v.ctx;
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
    v.text('TAT ' + (lead > 0 ? '+' + fmtDuration(lead) : '= now'), tx + 6, lane.y + 14, full ? C.bad : C.warn, 'left', true);
    v.text(fmtInt(s.remaining) + ' of ' + fmtInt(r.limit) + ' fit now · one every ' + fmtDuration(s.interval),
      x(t) + 6, top + h / 2 + 4, full ? C.bad : C.text, 'left', true);
    v.text('now + window', x(t + W) - 4, lane.y + lane.h - 4, C.accent, 'right');
    v.nowLine(lane, x(t));
    if (lane.label) v.text(ruleName(r), x(t + W / 2), lane.y + lane.h - 4, C.muted, 'center');
  },

  say(r, s, t, rule) {
    const lead = s.tat - t;
    return 'GCRA (' + rule + '): each request pushes the TAT on by ' + fmtDuration(s.interval) + '; it is ' +
      (lead > 0 ? fmtDuration(lead) + ' ahead of now' : 'at now') + ', so ' + fmtInt(s.remaining) +
      ' of the burst of ' + fmtInt(r.limit) + ' fit now.';
  },

  resetLabel: 'until the burst is whole',
  phrase: 'GCRA',
  overNote() {
    return { text: 'GCRA and the bucket allow a burst of limit and keep refilling at limit per window, so one window can hold nearly twice the limit', strong: false };
  },
  differNote: 'GCRA and the bucket earn room back gradually, one request per window ÷ limit, rather than when an old request leaves the window.',
};
