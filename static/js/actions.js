// The "Try it" buttons: one real check, the boundary test and a reset, and
// the log's refund buttons, each a real HTTP call from the browser on the
// watched window.

import { api, problemText, windowQuery } from './api.js';
import { toast } from './toast.js';
import { fmtSeconds, fmtInt, fmtDuration, shortId } from './format.js';
import { waitSpan, retryAfterText } from './wait.js';
import { answered, lastRequestFrom } from './last-request.js';

// INFLIGHT is the algorithm of a policy of requests in flight: its window
// holds leases, taken and given back, not checks.
export const INFLIGHT = 'inflight';

// bindActions wires the buttons; win() returns the watched {key, policy,
// limit, algorithm} (limit: the smallest of the policy's rules). On an
// inflight policy "send" takes a lease instead of a check. It returns what a
// decision on the window does to "Last request", whoever sent the check.
export function bindActions(ui, win) {
  ui.send.addEventListener('click', () => {
    const w = win();
    if (w.algorithm === INFLIGHT) onLease(ui, w);
    else onSend(ui, w);
  });
  ui.boundary.addEventListener('click', () => onBoundaryTest(ui, win()));
  ui.reset.addEventListener('click', () => onReset(ui, win()));
  return lastRequestFrom(ui.sendResult);
}

// clearActions forgets the results shown for another window.
export function clearActions(ui) {
  ui.boundaryResult.textContent = '';
  ui.boundaryResult.className = '';
  ui.sendResult.textContent = '';
  ui.sendResult.className = '';
}

// shower writes "Last request": text, or an array of text and nodes.
function shower(ui) {
  return (text, cls) => {
    ui.sendResult.replaceChildren(...[].concat(text));
    ui.sendResult.className = cls;
  };
}

// denialParts is a 429 as the page shows it: what happened, the exact wait
// counting down (as the ring does), and the Retry-After header labelled.
function denialParts(what, res, data) {
  const d = data || {};
  return [what + ': ', waitSpan(d.nowMs, d.retryAfterMs), ' · ' + retryAfterText(res.headers.get('Retry-After'))];
}

// onSend sends one check; with "wait up to" set, a check the window would
// deny books the first moment room frees (when that is within the wait) and
// is answered then.
async function onSend(ui, w) {
  const show = shower(ui);
  const body = { key: w.key, policy: w.policy };
  const wait = ui.wait && !ui.wait.disabled ? ui.wait.value : '0';
  if (wait && wait !== '0') {
    body.wait = wait;
    show('sent; it may wait up to ' + wait + ' for a slot…', '');
  }
  try {
    const { res, data } = await api('POST', '/api/v1/check', body);
    answered(data);
    if (res.status === 200 && data) {
      const waited = typeof data.waitedMs === 'number' ? ' after waiting ' + fmtInt(data.waitedMs) + ' ms for its booked slot' : '';
      show(data.failOpen
        ? '200 allowed (fail-open: Redis unreachable)'
        : '200 allowed' + waited + ' · ' + data.count + ' / ' + data.limit, 'is-allowed');
    } else if (res.status === 429) {
      const what = data && data.locked ? '429 locked out (level ' + data.lockLevel + ')' : '429 denied';
      show(denialParts(what, res, data), 'is-denied');
    } else {
      show(problemText(res, data), 'is-error');
      toast('Request failed: ' + problemText(res, data));
    }
  } catch (e) {
    show('network error', 'is-error');
    toast('Request failed: ' + e.message);
  }
}

// onLease takes a lease of the watched inflight window: POST
// /api/v1/leases. Its bar comes with the lease message, in every tab.
async function onLease(ui, w) {
  const show = shower(ui);
  try {
    const { res, data } = await api('POST', '/api/v1/leases', { key: w.key, policy: w.policy });
    if (res.status === 200 && data && data.leaseId) {
      show('200 lease ' + shortId(data.leaseId) + ' · ' + data.inFlight + ' / ' + data.limit +
        ' in flight, ends in ' + fmtDuration(data.expiresMs - data.nowMs) + ' unless released', 'is-allowed');
    } else if (res.status === 200 && data) {
      show('200 (fail-open: Redis unreachable, no lease held)', 'is-allowed');
    } else if (res.status === 429) {
      const exact = data && typeof data.retryAfterMs === 'number' ? ' (the first lease ends in ' + fmtSeconds(data.retryAfterMs) + ' s)' : '';
      show('429 every lease is held · ' + retryAfterText(res.headers.get('Retry-After')) + exact, 'is-denied');
    } else {
      show(problemText(res, data), 'is-error');
      toast('Lease failed: ' + problemText(res, data));
    }
  } catch (e) {
    show('network error', 'is-error');
    toast('Lease failed: ' + e.message);
  }
}

// releaseFrom returns what a lease bar's release button does: give that
// lease back, DELETE /api/v1/leases/<id>; the lease message that follows
// takes its bar away in every tab.
export function releaseFrom(win) {
  return async (id, btn) => {
    const w = win();
    btn.disabled = true;
    btn.textContent = 'releasing…';
    try {
      const { res, data } = await api('DELETE', '/api/v1/leases/' + encodeURIComponent(id) + '?' + windowQuery(w.key, w.policy));
      if (res.ok) return;
      toast('Release failed: ' + problemText(res, data));
    } catch (e) {
      toast('Release failed: ' + e.message);
    }
    btn.textContent = 'release';
    btn.disabled = false;
  };
}

let boundaryBusy = false;

// onBoundaryTest resets the window, then sends limit checks one after
// another and one more, each a real call, and reports what came back.
async function onBoundaryTest(ui, w) {
  if (boundaryBusy) return;
  const btn = ui.boundary;
  const out = ui.boundaryResult;
  const limit = w.limit;
  if (w.algorithm === INFLIGHT) {
    out.className = '';
    out.textContent = 'The boundary test is for window policies. Here, take leases one by one: the one past the limit gets 429.';
    return;
  }
  boundaryBusy = true;
  btn.disabled = true;
  out.className = '';
  out.textContent = 'resetting…';
  try {
    const r = await api('DELETE', '/api/v1/window?' + windowQuery(w.key, w.policy));
    if (!r.res.ok) {
      out.textContent = 'reset failed: ' + problemText(r.res, r.data);
      out.className = 'is-error';
      toast('Reset failed: ' + problemText(r.res, r.data));
      return;
    }
    let ok = 0;
    let passed = false;
    let text = [];
    for (let i = 1; i <= limit + 1; i++) {
      const { res, data } = await api('POST', '/api/v1/check', { key: w.key, policy: w.policy });
      if (res.status === 200) {
        ok++;
        out.textContent = ok + ' × 200…';
        if (i === limit + 1) text = [ok + ' × 200, no 429 (expected 429 at request ' + (limit + 1) + ')'];
        continue;
      }
      if (res.status === 429) {
        passed = i === limit + 1;
        text = passed
          ? denialParts(limit + ' × 200, then 429', res, data)
          : [ok + ' × 200, then 429 at request ' + i + ' (expected ' + limit + ' × 200)'];
      } else {
        text = [ok + ' × 200, then ' + problemText(res, data) + ' at request ' + i];
      }
      break;
    }
    out.replaceChildren(...text);
    out.className = passed ? 'is-allowed' : 'is-error';
  } catch (e) {
    out.textContent = 'network error: ' + e.message;
    out.className = 'is-error';
  } finally {
    boundaryBusy = false;
    btn.disabled = false;
  }
}

async function onReset(ui, w) {
  const btn = ui.reset;
  btn.disabled = true;
  try {
    const { res, data } = await api('DELETE', '/api/v1/window?' + windowQuery(w.key, w.policy));
    if (res.ok) toast('Window reset.', 'info');
    else toast('Reset failed: ' + problemText(res, data));
  } catch (e) {
    toast('Reset failed: ' + e.message);
  } finally {
    btn.disabled = false;
  }
}

// refundFrom returns what a log row's refund button does: take the request's
// entries back with a real POST /api/v1/refund on the watched window. The
// adjustment message that follows, to every tab, shows what it did.
export function refundFrom(win) {
  return async (id, btn) => {
    const w = win();
    btn.disabled = true;
    btn.textContent = 'refunding…';
    try {
      const { res, data } = await api('POST', '/api/v1/refund', { key: w.key, policy: w.policy, id: id });
      if (res.ok && data) {
        btn.textContent = data.refunded > 0 ? 'refunded' : 'already gone';
        return;
      }
      toast('Refund failed: ' + problemText(res, data));
    } catch (e) {
      toast('Refund failed: ' + e.message);
    }
    btn.textContent = 'refund';
    btn.disabled = false;
  };
}
