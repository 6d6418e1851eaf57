// "Last request" follows the watched window whoever sent the check: this
// page, another tab, curl, another instance. The page's own answers (over
// HTTP) say the most; every other check shows as its decision message says.
// A decision of the page's own check that arrives after its answer is
// recognised by its nowMs (the answer carries the same) and left alone.

import { OUTCOME, decisionOutcome } from './messages.js';
import { fmtInt, shortId } from './format.js';
import { waitSpan } from './wait.js';

const OWN_MAX = 32; // the page's own answers remembered: a boundary test's and more

const own = [];

// answered notes the nowMs of one of the page's own answers.
export function answered(data) {
  if (!data || typeof data.nowMs !== 'number') return;
  own.push(data.nowMs);
  if (own.length > OWN_MAX) own.shift();
}

// lastRequestFrom returns what a decision on the watched window does to
// "Last request" (el).
export function lastRequestFrom(el) {
  return (m) => {
    if (typeof m.nowMs === 'number' && own.includes(m.nowMs)) return;
    const o = decisionOutcome(m);
    const from = ' · seen on the stream' + (m.instance ? ', instance ' + shortId(String(m.instance)) : '');
    const counts = ' · ' + (m.count ?? '–') + ' / ' + (m.limit ?? '–');
    let parts;
    if (o === OUTCOME.ALLOWED || o === OUTCOME.WOULD_DENY) {
      const booked = typeof m.bookedMs === 'number' && m.bookedMs > m.nowMs
        ? ' (booked: answered in ' + fmtInt(m.bookedMs - m.nowMs) + ' ms)' : '';
      const shadow = o === OUTCOME.WOULD_DENY ? ' (shadow: enforced, a 429)' : '';
      parts = ['200 allowed' + booked + shadow + counts + from];
    } else {
      const what = m.locked ? '429 locked out (level ' + m.lockLevel + ')' : m.cached ? '429 denied (cached)' : '429 denied';
      parts = [what + ': ', waitSpan(m.nowMs, m.retryAfterMs), counts + from];
    }
    el.replaceChildren(...parts);
    el.className = o === OUTCOME.DENIED || o === OUTCOME.CACHED ? 'is-denied' : 'is-allowed';
  };
}
