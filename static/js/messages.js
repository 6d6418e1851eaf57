// The stream's messages. Every message type the page reads is named
// here once; other modules use these constants, never the strings. The
// server's twin is the Type constants of internal/bus (types.go): a Go test
// fails when the two lists differ.

export const MSG = Object.freeze({
  HELLO: 'hello',
  STATUS: 'status',
  TICK: 'tick',
  SNAPSHOT: 'snapshot',
  DECISION: 'decision',
  RESET: 'reset',
  RACE: 'race',
  ADJUSTMENT: 'adjustment', // a refund or a settle of one check's entries
  VIEWERS: 'viewers',
  OVERRIDE: 'override', // the override in force for the window changed: its rules and note
  LAB: 'lab', // one lab request decided by all five algorithms
  LAB_RESET: 'labReset', // a lab's windows were emptied
  LAB_SNAPSHOT: 'labSnapshot', // a lab's recent requests, for a tab that joins
  OVERVIEW: 'overview', // every policy's rates and one policy's top clients, once a second
  LEASE: 'lease', // a lease of an inflight policy acquired, refused, renewed, released or expired
});

// The kinds of a lease message.
export const LEASE = Object.freeze({
  ACQUIRED: 'acquired',
  REFUSED: 'refused',
  RENEWED: 'renewed',
  RELEASED: 'released',
  EXPIRED: 'expired',
});

// The kinds of an adjustment message: a refund took one check's entries
// back, a settle made their number the check's true cost.
export const ADJUST = Object.freeze({ REFUND: 'refund', SETTLE: 'settle' });

// decodeFrame returns the messages one text frame carries, in order: a frame
// is one message object or, batched, a JSON array of them. Anything that is
// not a message (bad JSON, a number, an object without a type) is skipped.
export function decodeFrame(text) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    return [];
  }
  if (Array.isArray(v)) return v.filter(isMessage);
  return isMessage(v) ? [v] : [];
}

function isMessage(m) {
  return m !== null && typeof m === 'object' && !Array.isArray(m) && typeof m.type === 'string';
}

// dispatch calls handlers[m.type](m) for a known type; unknown types are
// ignored, so a newer server can add messages without breaking the page.
export function dispatch(handlers, m) {
  const h = Object.prototype.hasOwnProperty.call(handlers, m.type) ? handlers[m.type] : null;
  if (h) h(m);
}

// Outcomes of a decision message, from its optional flags (issue 14): a
// shadow policy answers allow but may say it would have denied; a denial
// may come from an instance's local deny cache.
export const OUTCOME = Object.freeze({
  ALLOWED: 'allowed',
  DENIED: 'denied',
  CACHED: 'cached', // denied by the local deny cache, no Redis round trip
  WOULD_DENY: 'would-deny', // shadow policy: allowed, but enforced it would be a 429
});

export function decisionOutcome(m) {
  if (m.allowed) return m.shadow && m.wouldDeny ? OUTCOME.WOULD_DENY : OUTCOME.ALLOWED;
  return m.cached ? OUTCOME.CACHED : OUTCOME.DENIED;
}

// recordsEntry reports whether a decision added an entry to the window's log:
// allowed ones do; denials and shadow would-denies are not recorded.
export function recordsEntry(m) {
  return decisionOutcome(m) === OUTCOME.ALLOWED && typeof m.id === 'string' && typeof m.nowMs === 'number';
}
