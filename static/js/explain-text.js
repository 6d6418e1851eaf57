// The words of a decision's explanation, for a learner: the server builds
// the explanation's numbers (httplimit.Explain; every decision message
// carries them as `explain`), this module says them. Times read as seconds
// after the minute the longest window starts in, so the sums stay short:
// "the window (12.300 s, 22.300 s] held 5 of 5".

import { fmtUTC, fmtInt } from './format.js';

// timeBase is the start of the UTC minute holding the earliest moment e
// speaks of, the origin of its seconds.
export function timeBase(e) {
  let first = e.nowMs;
  for (const r of e.rules || []) if (!r.period && typeof r.fromMs === 'number') first = Math.min(first, r.fromMs);
  return Math.floor(first / 60000) * 60000;
}

// secs writes an instant as seconds after base: 12.512 s.
export function secs(ms, base) {
  return ((ms - base) / 1000).toFixed(3) + ' s';
}

function num(ms, base) {
  return ((ms - base) / 1000).toFixed(3);
}

// ruleWords says what one rule held and, without room, which entry must
// slide out and the retry's sum. The sum is also given in epoch ms, as the
// API answers it.
export function ruleWords(e, r, base) {
  const cost = e.cost || 1;
  const at = e.atMs || e.nowMs;
  if (r.period) {
    let s = r.name + ': this ' + r.period + ' (' + fmtUTC(r.fromMs) + ' to ' + fmtUTC(r.toMs) + ' UTC) had counted ' +
      fmtInt(r.count) + ' of ' + fmtInt(r.limit);
    s += r.fits ? '; ' + r.count + ' + ' + cost + ' ≤ ' + r.limit + ': room.'
      : '; no room until the next ' + r.period + ' starts: retry in ' + fmtInt(r.retryMs) + ' ms = ' + fmtInt(r.toMs) + ' − ' + fmtInt(at) + '.';
    return { text: s, sum: '' };
  }
  let s = r.name + ': the window (' + secs(r.fromMs, base) + ', ' + secs(r.toMs, base) + '] held ' + r.count + ' of ' + r.limit;
  if (r.fits) return { text: s + '; ' + r.count + ' + ' + cost + ' ≤ ' + r.limit + ': room.', sum: '' };
  if (typeof r.kthMs !== 'number') return { text: s + '; ' + r.count + ' + ' + cost + ' > ' + r.limit + ': no room.', sum: '' };
  const which = r.k === 1 ? 'the oldest' : 'entry ' + r.k + ' from the oldest';
  s += '; ' + which + ', at ' + secs(r.kthMs, base) + ', slides out at ' + secs(r.kthMs + r.windowMs, base) +
    ' → retry in ' + fmtInt(r.retryMs) + ' ms = ' + num(r.kthMs, base) + ' + ' + num(base + r.windowMs, base) + ' − ' + num(at, base);
  const sum = 'retryAfterMs = kth + window − now = ' + r.kthMs + ' + ' + r.windowMs + ' − ' + at + ' = ' + r.retryMs;
  return { text: s, sum: sum };
}

// summaryWords is the explanation's first sentence.
export function summaryWords(e, base) {
  const cost = e.cost || 1;
  if (e.outcome === 'failOpen') return 'Passed unchecked: Redis did not decide in time and the fail mode is open. Nothing was counted.';
  if (e.outcome === 'locked') {
    return 'locked: the key is locked out until ' + secs(e.lock.untilMs, base) + ' (level ' + e.lock.level +
      '), so every check is denied until then → retry in ' + fmtInt(e.retryAfterMs) + ' ms = ' +
      num(e.lock.untilMs, base) + ' − ' + num(e.nowMs, base) + '.';
  }
  if (e.outcome === 'booked') {
    return 'booked: at ' + secs(e.nowMs, base) + ' the window had no room, but room for cost ' + cost + ' frees at ' +
      secs(e.booking.bookedMs, base) + ', within the wait: the entry was recorded there, and the answer held ' +
      fmtInt(e.booking.waitMs) + ' ms.';
  }
  if (e.outcome === 'allowed') {
    return 'allowed at ' + secs(e.nowMs, base) + ': every rule had room for cost ' + cost + ', so the entry was recorded at that moment.';
  }
  const full = (e.rules || []).filter((r) => !r.fits).map((r) => r.name);
  return 'denied at ' + secs(e.nowMs, base) + ': ' + (full.join(' and ') || 'the policy') + ' had no room for cost ' + cost +
    ' → retry in ' + fmtInt(e.retryAfterMs) + ' ms; nothing was recorded.';
}

// notes are the remarks that apply: the deny cache, a shadow policy, an
// override, what a rebuilt explanation could not know.
export function notes(e) {
  const out = [];
  if (e.cached) out.push('Answered by this instance\'s local deny cache, repeating an earlier denial of Redis\'s: no script ran.');
  if (e.shadow) out.push('A shadow policy: the request passed all the same.');
  if (e.override) out.push('The override ' + e.override + ' set these rules.');
  if (e.recalled) out.push('Rebuilt from the log by GET /api/v1/explain' + (e.complete ? '.' : ', which can no longer say everything:'));
  for (const g of e.gaps || []) out.push(g);
  return out;
}

// stepDetail is a script step's numbers for e, or '' (skipped: null).
export function stepDetail(name, e) {
  const rec = e.outcome === 'allowed' || e.outcome === 'booked';
  const rules = e.rules || [];
  const details = {
    now: () => 'now = ' + e.nowMs,
    rules: () => rules.filter((r) => !r.period).map((r) => r.name + ': ' + r.count + ' + ' + (e.cost || 1) +
      (r.fits ? ' ≤ ' : ' > ') + r.limit + (typeof r.kthMs === 'number' ? ', k = ' + r.k + ', kth = ' + r.kthMs : '')).join(' · '),
    quotas: () => (rules.some((r) => r.period) ? rules.filter((r) => r.period).map((r) => r.name + ': ' + r.count).join(' · ') : null),
    wait: () => (e.booking ? 'slot ' + e.booking.bookedMs : null),
    booking: () => (e.booking ? 'slot ' + e.booking.bookedMs : null),
    lock: () => (e.lock ? 'locked until ' + e.lock.untilMs + ', level ' + e.lock.level : null),
    record: () => (rec ? (e.cost || 1) + ' entr' + ((e.cost || 1) === 1 ? 'y' : 'ies') + ' at ' + (e.atMs || e.nowMs) : null),
    answer: () => (rec ? null : 'retryAfterMs = ' + e.retryAfterMs),
  };
  return Object.prototype.hasOwnProperty.call(details, name) ? details[name]() : '';
}
