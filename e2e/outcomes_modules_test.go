package e2e_test

import "testing"

// TestModuleAdjustments: a refund or settle changes the window the page
// keeps at once, and a snapshot read before it (or in its millisecond) but
// received after it cannot bring back what it took or drop what it added.
func TestModuleAdjustments(t *testing.T) {
	tb := moduleTab(t)
	runModuleCase(t, tb, `
  const { WindowModel } = await import('/static/js/window-model.js');
  const { entryIndex, adjustText } = await import('/static/js/adjust.js');
  const W = 60000, T = 1800000000000;
  const snap = (entries, nowMs) => ({ type: 'snapshot', key: 'k', policy: 'p', entries, truncated: false, count: entries.length, limit: 10, windowMs: W, nowMs, rules: [] });
  const dec = (id, nowMs) => ({ type: 'decision', allowed: true, id, nowMs, count: 0, limit: 10 });
  const adj = (kind, id, was, now, nowMs, count) => ({ type: 'adjustment', kind, key: 'k', policy: 'p', id, was, now, count, limit: 10, nowMs });
  const ids = (m) => Array.from(m.entries.keys()).sort();

  eq('entry index', [entryIndex('a', 'a'), entryIndex('a:3', 'a'), entryIndex('ab:3', 'a'), entryIndex('a:x', 'a'), entryIndex('b', 'a')], [0, 3, -1, -1, -1]);

  let m = new WindowModel();
  m.setRules([{ limit: 10, windowMs: W }]);
  m.snapshot(snap([{ id: 'a', ms: T - 100 }, { id: 'a:1', ms: T - 100 }], T));
  m.decision(dec('b', T + 10));
  // A refund of b, then a snapshot Redis read in the same millisecond as b,
  // before the refund: b is not brought back from the recent decisions.
  m.adjustment(adj('refund', 'b', 1, 0, T + 11, 2));
  eq('refunded at once', ids(m), ['a', 'a:1']);
  m.snapshot(snap([{ id: 'a', ms: T - 100 }, { id: 'a:1', ms: T - 100 }], T + 10));
  eq('a snapshot of before the refund', ids(m), ['a', 'a:1']);
  m.snapshot(snap([{ id: 'a', ms: T - 100 }, { id: 'a:1', ms: T - 100 }, { id: 'b', ms: T + 10 }], T + 11));
  eq('a snapshot of the refund\'s millisecond', ids(m), ['a', 'a:1']);

  // A settle to more adds entries at the check's own score; to fewer takes
  // the highest-numbered.
  m.adjustment(adj('settle', 'a', 2, 4, T + 20, 4));
  eq('settled to more', [ids(m), Array.from(m.entries.values(), (e) => e.ms)], [['a', 'a:1', 'a:2', 'a:3'], [T - 100, T - 100, T - 100, T - 100]]);
  m.snapshot(snap([{ id: 'a', ms: T - 100 }, { id: 'a:1', ms: T - 100 }], T + 15));
  eq('a snapshot read before the settle keeps its entries', ids(m), ['a', 'a:1', 'a:2', 'a:3']);
  m.adjustment(adj('settle', 'a', 4, 1, T + 30, 1));
  eq('settled to fewer', ids(m), ['a']);
  m.snapshot(snap([{ id: 'a', ms: T - 100 }, { id: 'a:1', ms: T - 100 }, { id: 'a:2', ms: T - 100 }, { id: 'a:3', ms: T - 100 }], T + 25));
  eq('a snapshot read before it brings none back', ids(m), ['a']);
  // A newer snapshot is the truth again.
  m.snapshot(snap([{ id: 'a', ms: T - 100 }, { id: 'c', ms: T + 40 }], T + 41));
  m.expire(T + 42);
  eq('a newer snapshot', [ids(m), m.count(T + 42)], [['a', 'c'], 2]);
  eq('what the log says', [
    adjustText(adj('refund', 'x', 2, 0, 0, 0)), adjustText(adj('refund', 'x', 1, 0, 0, 0)), adjustText(adj('settle', 'x', 2, 4, 0, 0)),
    adjustText(adj('refund', 'x', 0, 0, 0, 0)), adjustText(adj('settle', 'x', 0, 0, 0, 0)),
  ], ['refund · 2 entries back', 'refund · 1 entry back', 'settle 2 → 4',
    'refund · nothing of that request left in the window', 'settle · nothing of that request left in the window']);
`)
}

// TestModuleLock: a locked denial shows the lock until its end and the ring
// counts it down; then what is left of the Retry-After; an allowed decision
// or a reset ends both.
func TestModuleLock(t *testing.T) {
	tb := moduleTab(t)
	runModuleCase(t, tb, `
  const { Blocked } = await import('/static/js/blocked.js');
  const T = 1800000000000;
  const slot = document.createElement('div');
  const b = new Blocked(slot);
  const lockEl = () => slot.querySelector('[data-testid="lock"]');
  b.decision({ allowed: false, count: 2, limit: 2, nowMs: T, retryAfterMs: 9000, locked: true, lockLevel: 2, lockUntilMs: T + 3000 });
  b.render(T + 1000);
  eq('the lock', [lockEl().getAttribute('data-until'), lockEl().textContent.includes('locked · level 2'), b.verdict(T + 1000)], [String(T + 3000), true, 'locked']);
  eq('the ring counts the lock', b.ring(T + 1000), { retryAt: T + 3000, total: 3000, locked: true });
  b.decision({ allowed: false, cached: true, count: 2, limit: 2, nowMs: T + 1500, retryAfterMs: 7500, locked: true, lockLevel: 2, lockUntilMs: T + 3000 });
  eq('the same lock keeps its length', b.ring(T + 1600).total, 3000);
  b.render(T + 3000);
  eq('gone at its end', [lockEl(), b.verdict(T + 3000), b.ring(T + 3000)], [null, 'blocked', { retryAt: T + 9000, total: 7500 }]);
  // A lock while the window has room: still blocked.
  b.decision({ allowed: false, count: 0, limit: 2, nowMs: T + 20000, retryAfterMs: 3000, locked: true, lockLevel: 3, lockUntilMs: T + 23000 });
  b.render(T + 20001);
  eq('locked with room', [b.verdict(T + 20001), lockEl().getAttribute('data-until')], ['locked', String(T + 23000)]);
  b.decision({ allowed: true, count: 1, limit: 2, nowMs: T + 20002 });
  b.render(T + 20003);
  eq('an allowed check: no lock', [lockEl(), b.verdict(T + 20003), b.ring(T + 20003)], [null, '', null]);
  b.decision({ allowed: false, count: 2, limit: 2, nowMs: T + 30000, retryAfterMs: 3000, locked: true, lockLevel: 1, lockUntilMs: T + 33000 });
  b.clear();
  eq('a reset: no lock', [lockEl(), b.verdict(T + 30001)], [null, '']);
  // A refund that leaves room ends a denial's wait, not a lock.
  b.decision({ allowed: false, count: 2, limit: 2, nowMs: T + 40000, retryAfterMs: 5000 });
  b.adjustment({ kind: 'refund', count: 1, limit: 2, nowMs: T + 40001 });
  eq('room after a refund', b.verdict(T + 40002), '');
  b.decision({ allowed: false, count: 2, limit: 2, nowMs: T + 50000, retryAfterMs: 5000, locked: true, lockLevel: 1, lockUntilMs: T + 55000 });
  b.adjustment({ kind: 'refund', count: 1, limit: 2, nowMs: T + 50001 });
  eq('a refund does not end a lock', b.verdict(T + 50002), 'locked');
`)
}
