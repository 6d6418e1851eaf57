package e2e_test

// Unit tests of the page's modules, run in Chromium itself: each imports the
// module the page serves (/static/js/…) and checks what it computes, so the
// cases the stream rarely produces on cue (batched frames, a window too big
// to list, a late tick) are covered without a server that misbehaves.

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/ratescope/ratescope/internal/apptest"
)

// moduleTab opens the page (on an embedded Redis; the modules need none) so
// that its origin serves the modules.
func moduleTab(t *testing.T) *tab {
	t.Helper()
	browser(t)
	app := apptest.Start(t, nil)
	tb := openTab(t, browser(t), "tab")
	tb.navigate(app.URL + "/?key=" + uniqueKey(t) + "&policy=demo")
	return tb
}

// runModuleCase evaluates an async function body in the page and fails the
// test with each line it returns: an empty list means every check held.
func runModuleCase(t *testing.T, tb *tab, body string) {
	t.Helper()
	problems := evaluate[[]string](tb, `(async () => {
  const out = [];
  const eq = (what, got, want) => {
    const g = JSON.stringify(got), w = JSON.stringify(want);
    if (g !== w) out.push(what + ': got ' + g + ', want ' + w);
  };
  const near = (what, got, want, tol) => {
    if (!(Math.abs(got - want) <= tol)) out.push(what + ': got ' + got + ', want ' + want + ' ± ' + tol);
  };
`+body+`
  return out;
})()`, chromedp.EvalAwaitPromise)
	for _, p := range problems {
		t.Error(p)
	}
}

func TestModuleMessages(t *testing.T) {
	tb := moduleTab(t)
	runModuleCase(t, tb, `
  const { decodeFrame, dispatch, MSG, decisionOutcome, recordsEntry } = await import('/static/js/messages.js');
  eq('one object', decodeFrame('{"type":"tick","nowMs":5}'), [{ type: 'tick', nowMs: 5 }]);
  eq('an array, in order', decodeFrame('[{"type":"decision","id":"a"},{"type":"tick","nowMs":7},{"type":"decision","id":"b"}]').map((m) => m.id || m.nowMs), ['a', 7, 'b']);
  eq('bad JSON', decodeFrame('{"type":'), []);
  eq('not messages', decodeFrame('[1, null, {"nowMs":3}, [], {"type":"viewers","count":2}]'), [{ type: 'viewers', count: 2 }]);
  eq('a bare number', decodeFrame('42'), []);
  const seen = [];
  const handlers = { [MSG.TICK]: (m) => seen.push('tick ' + m.nowMs), [MSG.DECISION]: (m) => seen.push('decision ' + m.id) };
  for (const m of decodeFrame('[{"type":"tick","nowMs":1},{"type":"brand-new"},{"type":"decision","id":"x"},{"type":"toString"}]')) dispatch(handlers, m);
  eq('dispatch', seen, ['tick 1', 'decision x']);
  eq('outcomes', [
    decisionOutcome({ allowed: true }), decisionOutcome({ allowed: false }), decisionOutcome({ allowed: false, cached: true }),
    decisionOutcome({ allowed: true, shadow: true, wouldDeny: true }), decisionOutcome({ allowed: true, shadow: true }),
  ], ['allowed', 'denied', 'cached', 'would-deny', 'allowed']);
  eq('recorded', [
    recordsEntry({ allowed: true, id: 'a', nowMs: 1 }), recordsEntry({ allowed: false, id: 'a', nowMs: 1 }),
    recordsEntry({ allowed: true, shadow: true, wouldDeny: true, id: 'a', nowMs: 1 }),
  ], [true, false, false]);
`)
}

// TestModuleWindowModel: what the page knows of a window, from snapshots and
// decisions, in both regimes: every entry kept, and too many to list.
func TestModuleWindowModel(t *testing.T) {
	tb := moduleTab(t)
	runModuleCase(t, tb, `
  const { WindowModel, BINS, SPAN } = await import('/static/js/window-model.js');
  const W = 60000, T = 1800000000000;
  const snap = (entries, count, nowMs, truncated) => ({ type: 'snapshot', key: 'k', policy: 'p', entries, truncated, count, limit: 100000, windowMs: W, nowMs, rules: [] });
  const dec = (id, nowMs, extra) => Object.assign({ type: 'decision', allowed: true, id, nowMs, count: 0, limit: 100000 }, extra || {});

  // A small window: every entry kept, counted exactly, sliding out on time.
  let m = new WindowModel();
  m.setRules([{ limit: 100000, windowMs: W }]);
  eq('unknown before a snapshot', m.count(T), null);
  m.snapshot(snap([{ id: 'a', ms: T - 50000 }, { id: 'b', ms: T - 1000 }], 2, T, false));
  m.decision(dec('c', T + 10, { count: 3 }));
  m.decision(dec('d', T + 20, { allowed: false, count: 3 }));
  m.expire(T + 100);
  eq('exact', [m.exact, m.count(T + 100), m.oldestMs], [true, 3, T - 50000]);
  m.expire(T + 10001);
  eq('after a slide-out', [m.count(T + 10001), m.oldestMs], [2, T - 1000]);
  // A snapshot that raced a decision keeps it; one that no longer lists an entry drops it.
  m.decision(dec('e', T + 20000));
  m.snapshot(snap([{ id: 'c', ms: T + 10 }], 1, T + 19999, false));
  m.expire(T + 20001);
  eq('merged', Array.from(m.entries.keys()).sort(), ['c', 'e']);
  m.reset(T + 30000);
  m.expire(T + 30001);
  eq('reset', [m.exact, m.count(T + 30001), m.oldestMs], [true, 0, null]);

  // Too many to keep: beyond 1,500 kept entries the page keeps counts only.
  m = new WindowModel();
  m.setRules([{ limit: 100000, windowMs: W }]);
  m.snapshot(snap([], 0, T, false));
  for (let i = 0; i < 1501; i++) m.decision(dec('x' + i, T + i));
  eq('beyond the cap', [m.exact, m.entries.size], [false, 0]);

  // A truncated snapshot: 1,000 listed of 20,000, then 600 seen arriving.
  // The rest are counted but unplaced, between the last listed score and
  // the moment this tab started seeing decisions.
  m = new WindowModel();
  m.setRules([{ limit: 100000, windowMs: W }]);
  const listed = [];
  for (let i = 0; i < 1000; i++) listed.push({ id: 'l' + i, ms: T - 50000 + i });
  m.snapshot(snap(listed, 20000, T, true));
  // The ones seen all arrived in the first 10 ms of the bin [T+2880, T+3000),
  // and now is 11 ms into it: all of them are in the window.
  for (let i = 0; i < 600; i++) m.decision(dec('s' + i, T + 2881 + (i % 10), { count: 20001 + i }));
  const t = T + 2891;
  m.expire(t);
  eq('counted', [m.exact, m.count(t), m.oldestMs], [false, 20600, T - 50000]);
  eq('bin', [m.bin(T + 2880), m.bin(t)], [(T + 2880) / m.binMs, (T + 2880) / m.binMs]);
  const d = m.density(t);
  eq('density', [d.count, d.listed, d.seen, d.unplaced], [20600, 1000, 600, 19000]);
  eq('gap', [d.gap.lo, d.gap.hi], [T - 50000 + 999, T]);
  // Everything drawn adds up to the count: placed per bin plus the spread.
  let drawn = 0;
  for (let k = Math.floor((t - W) / m.binMs); k <= Math.floor(t / m.binMs); k++) drawn += m.knownAt(k) + m.estimateAt(k, d);
  near('drawn', drawn, 20600, 2);
  eq('bins', [BINS, m.binMs], [600, SPAN * W / 600]);
  // Single-rule decisions carry the true count; later ones win.
  m.decision(dec('late', t, { count: 25000 }));
  eq('count from a decision', m.count(t), 25000);
  // Listed entries that slide out leave the count.
  m.expire(T - 50000 + 500 + W);
  near('after 501 listed slid out', m.count(T - 50000 + 500 + W), 25000 - 501, 5);
`)
}

func TestModuleClockAndStatus(t *testing.T) {
	tb := moduleTab(t)
	runModuleCase(t, tb, `
  const { Clock } = await import('/static/js/clock.js');
  const { statusOf } = await import('/static/js/status.js');
  const c = new Clock();
  eq('unknown', [c.known(), c.now()], [false, null]);
  const base = 1800000000000;
  const p0 = performance.now();
  c.sync(base);
  near('interpolated', c.now(), base + (performance.now() - p0), 5);
  eq('on time', Math.round(c.behindMs()), 0);
  // A tick that arrives 3 s after one sent 3 s after the first is late by
  // nothing; one that claims an instant 3 s earlier than that is 3 s late.
  const lag = new Clock();
  lag.lagSample(1000);
  lag.lagSample(4000);
  eq('late', Math.round(lag.behindMs()), 3000);
  lag.lagSample(1200);
  eq('caught up', Math.round(lag.behindMs()), 200);
  eq('status', [
    statusOf(false, 'up', 0), statusOf(true, 'unknown', 0), statusOf(true, 'down', 5000),
    statusOf(true, 'up', 2500), statusOf(true, 'up', 1500),
  ], ['reconnecting', 'reconnecting', 'redis down', 'lagging', 'live']);
  // The clock never runs backwards for a small correction.
  const before = c.now();
  c.sync(before - 300);
  eq('monotonic', c.now() >= before, true);
`)
}

// TestModuleLogAndRate: the log draws at most 50 rows however many
// decisions arrive, marks cached denials and shadow would-denies (their own
// badge colour, data-cached / data-would-deny), and the rate counts a
// second's decisions, a would-deny as denied.
func TestModuleLogAndRate(t *testing.T) {
	tb := moduleTab(t)
	runModuleCase(t, tb, `
  const { Log, LOG_MAX } = await import('/static/js/log.js');
  const { Rate } = await import('/static/js/rate.js');
  const { Writer } = await import('/static/js/dom.js');
  const ol = document.createElement('ol');
  const log = new Log(ol);
  for (let i = 0; i < 10000; i++) log.decision({ allowed: i % 2 === 0, count: i, limit: 100000, nowMs: 1800000000000 + i, retryAfterMs: 1500 });
  log.render(100000);
  eq('rows', [LOG_MAX, ol.children.length], [50, 50]);
  eq('newest first', ol.firstElementChild.querySelector('.log-count').textContent, '9999 / 100000');
  log.decision({ allowed: false, cached: true, count: 5, limit: 5, nowMs: 1, retryAfterMs: 2000 });
  log.decision({ allowed: true, shadow: true, wouldDeny: true, count: 5, limit: 5, nowMs: 2, retryAfterMs: 3000 });
  log.renderedAt = -Infinity;
  log.render(100000);
  const [shadow, cached] = ol.children;
  const look = (li) => [li.className, li.querySelector('.badge').className, li.querySelector('.badge').textContent,
    li.querySelector('.log-what').textContent, li.getAttribute('data-cached'), li.getAttribute('data-would-deny')];
  eq('shadow', look(shadow),
    ['log-entry is-would-deny is-new', 'badge badge-shadow', '200', 'would deny · shadow retryAfterMs 3000', null, 'true']);
  eq('cached', look(cached),
    ['log-entry is-denied is-cached is-new', 'badge badge-bad', '429', 'cached retryAfterMs 2000', 'true', null]);
  log.decision({ allowed: true, shadow: true, wouldDeny: true, cached: true, count: 5, limit: 5, nowMs: 3, retryAfterMs: 1000 });
  log.decision({ allowed: true, shadow: true, count: 4, limit: 5, nowMs: 4, id: 'x' });
  log.renderedAt = -Infinity;
  log.render(100000);
  const [shadowAllowed, cachedShadow] = ol.children;
  eq('a cached would-deny', look(cachedShadow),
    ['log-entry is-would-deny is-new', 'badge badge-shadow', '200', 'would deny · shadow cached retryAfterMs 1000', 'true', 'true']);
  eq('an allowed shadow check', look(shadowAllowed),
    ['log-entry is-allowed is-new', 'badge badge-ok', '200', 'allowed', null, null]);
  eq('still 50', ol.children.length, 50);

  const root = document.createElement('div');
  const text = document.createElement('span');
  const canvas = document.createElement('canvas');
  const rate = new Rate({ root, text, canvas }, new Writer());
  const s = 1800000000;
  for (let i = 0; i < 1240; i++) rate.decision({ allowed: true, nowMs: s * 1000 + (i % 1000) });
  for (let i = 0; i < 3310; i++) rate.decision({ allowed: false, nowMs: s * 1000 + (i % 1000) });
  rate.decision({ allowed: true, shadow: true, wouldDeny: true, nowMs: s * 1000 + 5 });
  rate.decision({ allowed: false, nowMs: (s + 1) * 1000 });
  rate.render((s + 1) * 1000 + 500);
  eq('rate: a would-deny counts as denied', [text.textContent, root.getAttribute('data-denied'), root.getAttribute('data-would-deny')],
    ['1,240/s allowed · 3,311/s denied (1 would deny · shadow)', '3311', '1']);
`)
}

// TestLogRowsDoNotOverlap: rows with the widest counts a log policy has,
// at the widths the page supports, keep their cells apart.
func TestLogRowsDoNotOverlap(t *testing.T) {
	tb := moduleTab(t)
	for _, w := range []int64{1280, 390} {
		tb.run("viewport", chromedp.EmulateViewport(w, 844))
		problems := evaluate[[]string](tb, `(async () => {
  const { Log } = await import('/static/js/log.js');
  const ol = document.querySelector('[data-testid="log"]');
  const log = new Log(ol);
  log.clear();
  for (const [c, a] of [[100000, true], [99999, false], [5, true], [100000, false]]) {
    log.decision({ allowed: a, count: c, limit: 100000, nowMs: 1800000000123, retryAfterMs: 59999, instance: 'abcdef0123456789' });
  }
  log.decision({ allowed: false, cached: true, count: 100000, limit: 100000, nowMs: 1800000000123, retryAfterMs: 59999, instance: 'abcdef0123456789' });
  log.decision({ allowed: true, shadow: true, wouldDeny: true, count: 100000, limit: 100000, nowMs: 1800000000123, retryAfterMs: 59999, instance: 'abcdef0123456789' });
  log.renderedAt = -Infinity;
  log.render(100000);
  await new Promise((r) => requestAnimationFrame(() => r()));
  return `+layoutProblemsJS+`;
})()`, chromedp.EvalAwaitPromise)
		for _, p := range problems {
			t.Errorf("at %d px: %s", w, p)
		}
	}
}

// TestModuleAlgoModel: the state of the algorithms that keep no entries,
// moved on from a snapshot to later instants as their scripts read it —
// fixed and counter windows rolling over, the GCRA burst coming back, the
// bucket refilling — and decisions and resets between snapshots.
func TestModuleAlgoModel(t *testing.T) {
	tb := moduleTab(t)
	runModuleCase(t, tb, `
  const { AlgoModel } = await import('/static/js/algo-model.js');
  await (await import('/static/js/algorithms.js')).loadAlgorithms(['fixed', 'counter', 'gcra', 'bucket']);
  const W = 10000, T = 1800000000000; // T is a multiple of W: a window edge
  const snap = (algorithm, nowMs, rule) => ({ type: 'snapshot', key: 'k', policy: 'p', algorithm, entries: [], count: rule.count, limit: rule.limit, windowMs: W, nowMs, rules: [rule] });
  const at = (m, t) => { const s = m.at(m.rules[0], t); return [s.used, s.resetAt]; };

  let m = new AlgoModel();
  eq('unknown before a snapshot', [m.known, m.count(T)], [false, null]);
  m.snapshot(snap('fixed', T + 3000, { limit: 5, windowMs: W, count: 3, remaining: 2, fixed: { windowStartMs: T, count: 3 } }));
  eq('fixed in its window', at(m, T + 9999), [3, T + W]);
  eq('fixed at the edge', at(m, T + W), [0, null]);
  eq('fixed count', [m.count(T + 5000), m.countIn(W, T + W)], [3, 0]);

  m = new AlgoModel();
  m.snapshot(snap('counter', T + 2000, { limit: 5, windowMs: W, count: 5, remaining: 0, counter: { windowStartMs: T, prevCount: 4, currCount: 1 } }));
  eq('counter: 1 + ⌈4 × 0.8⌉', at(m, T + 2000), [5, T + 2 * W]);
  near('counter estimate', m.at(m.rules[0], T + 2000).estimate, 4.2, 1e-9);
  eq('counter: 1 + ⌈4 × 0.25⌉', at(m, T + 7500), [2, T + 2 * W]);
  eq('counter: the current window becomes the previous', at(m, T + W), [1, T + 2 * W]);
  eq('counter: two windows on', at(m, T + 2 * W + 1), [0, null]);

  m = new AlgoModel();
  m.snapshot(snap('gcra', T, { limit: 4, windowMs: W, count: 2, remaining: 2, gcra: { tatMs: T + 5000, emissionIntervalMs: 2500 } }));
  eq('gcra: two of the burst used', at(m, T), [2, T + 5000]);
  eq('gcra: one emission interval later', at(m, T + 2500), [1, T + 5000]);
  eq('gcra: the TAT passed', at(m, T + 6000), [0, null]);

  m = new AlgoModel();
  m.snapshot(snap('bucket', T, { limit: 5, windowMs: W, count: 4, remaining: 1, bucket: { tokens: 1.5, updatedMs: T - 100 } }));
  eq('bucket: 1.5 tokens', at(m, T), [4, T + 7000]);
  eq('bucket: a token every 2 s', at(m, T + 1000), [3, T + 7000]);
  eq('bucket: full', at(m, T + 8000), [0, null]);
  near('bucket level', m.at(m.rules[0], T + 500).tokens, 1.75, 1e-9);

  // A decision says the count at once; a snapshot read after it takes
  // over, one read before it does not.
  m.decision({ type: 'decision', allowed: true, count: 5, limit: 5, nowMs: T + 10 });
  eq('after a decision', m.countIn(W, T + 10), 5);
  m.snapshot(snap('bucket', T + 5, { limit: 5, windowMs: W, count: 4, remaining: 1, bucket: { tokens: 9, updatedMs: T } }));
  eq('a snapshot read before the decision', [m.countIn(W, T + 10), m.snapNowMs], [5, T + 5]);
  m.snapshot(snap('bucket', T + 1, { limit: 5, windowMs: W, count: 0, remaining: 5, bucket: { tokens: 5, updatedMs: T } }));
  eq('an older snapshot is ignored', m.snapNowMs, T + 5);
  m.snapshot(snap('bucket', T + 20, { limit: 5, windowMs: W, count: 5, remaining: 0, bucket: { tokens: 0.5, updatedMs: T + 10 } }));
  eq('a newer snapshot', at(m, T + 20), [5, T + 20 + 9000]);
  m.reset(T + 30);
  eq('reset: a full bucket', at(m, T + 30), [0, null]);
  m = new AlgoModel();
  m.snapshot(snap('gcra', T, { limit: 4, windowMs: W, count: 2, remaining: 2, gcra: { tatMs: T + 5000, emissionIntervalMs: 2500 } }));
  m.reset(T + 100);
  eq('reset: no TAT ahead', at(m, T + 100), [0, null]);
`)
}
