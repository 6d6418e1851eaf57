// Refunds and settles on the page. A refund takes back the entries one
// check recorded; a settle makes their number the check's true cost: fewer,
// and the highest-numbered go; more, and the missing ones join at the
// check's own score. Entry k of check id is the member id (k = 0) or id:k.

import { ADJUST } from './messages.js';
import { fmtInt } from './format.js';

// adjustEntries applies adjustment a ({id, was, now, ms}: the check's entries
// before and after, and its score, null when unknown) to entries (member ->
// {ms, lane}); lane(ms) places an entry that joins.
export function adjustEntries(entries, a, lane) {
  for (const id of entries.keys()) {
    if (entryIndex(id, a.id) >= a.now) entries.delete(id);
  }
  if (a.ms === null) return; // the page never held the check: the snapshot brings them
  for (let k = a.was; k < a.now; k++) {
    const id = k === 0 ? a.id : a.id + ':' + k;
    if (!entries.has(id)) entries.set(id, { ms: a.ms, lane: lane(a.ms) });
  }
}

// entryIndex is k when member is entry k of check id, else -1.
export function entryIndex(member, id) {
  if (member === id) return 0;
  if (member.length <= id.length + 1 || member[id.length] !== ':' || !member.startsWith(id)) return -1;
  const k = Number(member.slice(id.length + 1));
  return Number.isInteger(k) && k > 0 ? k : -1;
}

// adjustText says what an adjustment message did, in a log row:
// "refund · 2 entries back", "settle 2 → 4".
export function adjustText(m) {
  const was = Math.max(0, Number(m.was) || 0);
  const now = Math.max(0, Number(m.now) || 0);
  if (was === 0) return m.kind + ' · nothing of that request left in the window';
  if (m.kind === ADJUST.REFUND) return 'refund · ' + fmtInt(was) + (was === 1 ? ' entry' : ' entries') + ' back';
  return 'settle ' + fmtInt(was) + ' → ' + fmtInt(now);
}
