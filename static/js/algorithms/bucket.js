// The token bucket: tokens refilled continuously at limit per window. The
// page draws the level of tokens refilling towards the capacity.

import { fmtDuration, fmtInt } from '../format.js';
import { C } from '../algo-view.js';
import gcra from './gcra.js';

const EPS = 1e-9; // keeps floor() of a whole number computed in floats whole

export default {
  // at is rule r's state at t, refilled from the snapshot taken at snapNowMs.
  at(r, t, snapNowMs) {
    const L = r.limit;
    const W = r.windowMs;
    const tokens = Math.min(L, r.bucket.tokens + Math.max(0, t - snapNowMs) * L / W);
    const fullAt = snapNowMs + (L - r.bucket.tokens) * W / L;
    return { used: L - Math.floor(tokens + EPS), resetAt: tokens < L ? fullAt : null, tokens: tokens };
  },

  empty(limit, windowMs, t) {
    return { tokens: limit, updatedMs: t };
  },

  draw(v, lane, r, s, t) {
    const c = v.ctx;
    const L = r.limit;
    const pad = 14;
    const x0 = lane.x + pad;
    const w = lane.w - 2 * pad;
    const top = lane.y + 22;
    const h = Math.max(12, lane.h - 44);
    c.fillStyle = '#ffffff';
    c.fillRect(x0, top, w, h);
    const f = Math.min(1, Math.max(0, s.tokens / L));
    const whole = Math.floor(s.tokens + EPS);
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
    v.text(tokens + ' / ' + fmtInt(L) + ' tokens', x0, lane.y + 15, whole < 1 ? C.bad : C.ok, 'left', true);
    const refill = '+1 token every ' + fmtDuration(r.windowMs / L) +
      (s.resetAt !== null ? ' · full in ' + fmtDuration(Math.max(0, s.resetAt - t)) : ' · full');
    v.text(refill, x0 + w, lane.y + 15, C.muted, 'right');
    v.text('empty', x0, top + h + 13, C.muted, 'left');
    v.text('capacity ' + fmtInt(L), x0 + w, top + h + 13, C.muted, 'right');
  },

  say(r, s, t, rule) {
    return 'Token bucket (' + rule + '): ' + s.tokens.toFixed(2) + ' tokens, refilling by one every ' +
      fmtDuration(r.windowMs / r.limit) + '; a request takes one per unit of cost.';
  },

  resetLabel: 'until the bucket is full',
  phrase: 'the token bucket',
  // It decides as GCRA does, so the lab says the same of both.
  overNote: gcra.overNote,
  differNote: gcra.differNote,
};
