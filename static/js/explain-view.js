// The explanation of one decision of the log (testid 'explain'): clicking a
// row — or Enter or Space on it, every row is focusable — opens it; Escape
// or its close button closes it and gives the focus back to the row. A
// decision brings its explanation's numbers (the message's `explain`); a row
// recorded before this tab opened has only an id, so its explanation is
// asked of GET /api/v1/explain, rebuilt from the log.

import { byTestId, span } from './dom.js';
import { api, problemText, windowQuery } from './api.js';
import { readFacts } from './facts.js';
import { timeBase, secs, ruleWords, summaryWords, notes, stepDetail } from './explain-text.js';
import { fmtUTC } from './format.js';

const what = new WeakMap(); // row → its decision message, or {earlier: {id, ms}}

// explainable makes a log row open its explanation.
export function explainable(li, m) {
  what.set(li, m);
  li.tabIndex = 0;
  li.dataset.explainable = 'true';
  li.title = 'Why this answer? Click, or press Enter';
}

// attachExplain wires the log list el to the panel beside it.
export function attachExplain(el) {
  const panel = byTestId('explain');
  if (!panel) return;
  let opener = null;
  const open = (li) => {
    const m = what.get(li);
    if (!m) return;
    opener = li;
    if (m.explain) show(panel, m.explain, m);
    else if (m.earlier) fetchRecalled(panel, m.earlier.id);
  };
  const close = () => {
    if (panel.hidden) return;
    panel.hidden = true;
    if (opener && opener.isConnected) opener.focus();
    opener = null;
  };
  el.addEventListener('click', (ev) => {
    const t = ev.target instanceof Element ? ev.target : null;
    if (!t || t.closest('button')) return; // the refund button is its own
    const li = t.closest('li');
    if (li) open(li);
  });
  el.addEventListener('keydown', (ev) => {
    if (ev.key !== 'Enter' && ev.key !== ' ') return;
    const li = ev.target instanceof Element && ev.target.matches('li') ? ev.target : null;
    if (!li || !what.has(li)) return;
    ev.preventDefault();
    open(li);
  });
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') close();
  });
  panel.addEventListener('click', (ev) => {
    if (ev.target instanceof Element && ev.target.closest('[data-testid="explain-close"]')) close();
  });
}

async function fetchRecalled(panel, id) {
  const key = byTestId('key');
  const policy = byTestId('policy');
  const q = windowQuery(key ? key.value : '', policy ? policy.value : '') + '&id=' + encodeURIComponent(id);
  const { res, data } = await api('GET', '/api/v1/explain?' + q);
  if (res.ok && data && data.explain) show(panel, data.explain, null);
  else show(panel, null, null, 'No explanation: ' + problemText(res, data));
}

// show fills the panel with e's explanation and opens it.
function show(panel, e, m, failure) {
  const body = document.createElement('div');
  body.className = 'explain-body';
  const head = document.createElement('div');
  head.className = 'explain-head';
  const h = document.createElement('h3');
  h.id = 'explain-title';
  h.textContent = 'Why this answer';
  const x = document.createElement('button');
  x.type = 'button';
  x.className = 'explain-close';
  x.dataset.testid = 'explain-close';
  x.textContent = 'close';
  x.setAttribute('aria-label', 'close the explanation (Escape)');
  head.append(h, x);
  body.append(head);
  if (!e) {
    body.append(para('explain-summary', failure || 'No explanation for this row.'));
    return open(panel, body);
  }
  const base = timeBase(e);
  panel.dataset.outcome = e.outcome;
  panel.dataset.nowMs = String(e.nowMs || '');
  panel.dataset.retryAfterMs = String(e.retryAfterMs);
  const sum = para('explain-summary', summaryWords(e, base));
  sum.dataset.testid = 'explain-summary';
  body.append(sum);
  if (e.nowMs) body.append(para('explain-base muted small', 'Times are seconds after ' + fmtUTC(base) + ' UTC; now = ' + secs(e.nowMs, base) + ' (' + e.nowMs + ' on Redis\'s clock).'));
  const rules = document.createElement('ul');
  rules.className = 'explain-rules';
  for (const r of e.rules || []) {
    const w = ruleWords(e, r, base);
    const li = document.createElement('li');
    li.dataset.testid = 'explain-rule';
    li.dataset.fits = String(r.fits);
    if (typeof r.kthMs === 'number') li.dataset.kthMs = String(r.kthMs);
    if (typeof r.oldestMs === 'number') li.dataset.oldestMs = String(r.oldestMs);
    li.dataset.retryMs = String(r.retryMs);
    li.append(span('explain-rule-text', w.text));
    if (w.sum) {
      const c = document.createElement('code');
      c.className = 'explain-sum';
      c.dataset.testid = 'explain-sum';
      c.textContent = w.sum;
      li.append(document.createElement('br'), c);
    }
    rules.append(li);
  }
  if (rules.children.length) body.append(rules);
  if (e.lock) {
    const l = para('explain-lock', 'Lock: ends at ' + e.lock.untilMs + ' (' + secs(e.lock.untilMs, base) + '), level ' + e.lock.level + '; each lock within 24 h of the last doubles the time.');
    l.dataset.untilMs = String(e.lock.untilMs);
    body.append(l);
  }
  for (const n of notes(e)) body.append(para('explain-note muted small', n));
  body.append(stepsList(e));
  open(panel, body);
}

// stepsList is the script's steps that ran, with this decision's numbers:
// a rebuilt explanation brings its own; for a decision message they are the
// page's steps (read from the script) with the numbers beside them.
function stepsList(e) {
  const ol = document.createElement('ol');
  ol.className = 'explain-steps steps';
  ol.dataset.testid = 'explain-steps';
  let steps = e.steps;
  if (!steps) {
    const app = document.getElementById('app');
    const log = readFacts(app).algorithms.find((a) => a.name === (e.algorithm || 'log'));
    steps = ((log && log.steps) || []).map((s) => {
      const d = e.cached ? null : stepDetail(s.name, e);
      return { name: s.name, commands: s.commands, text: s.text, detail: d || '', skipped: d === null };
    });
  }
  for (const s of steps) {
    const li = document.createElement('li');
    li.dataset.step = s.name;
    if (s.skipped) li.className = 'is-skipped';
    for (const c of s.commands || []) {
      const code = document.createElement('code');
      code.textContent = c;
      li.append(code, ' ');
    }
    li.append(s.text);
    if (s.detail) li.append(' ', span('explain-detail', '→ ' + s.detail));
    if (s.skipped) li.append(' ', span('explain-detail muted', '(did nothing here)'));
    ol.append(li);
  }
  return ol;
}

function para(cls, text) {
  const p = document.createElement('p');
  p.className = cls;
  p.textContent = text;
  return p;
}

function open(panel, body) {
  panel.replaceChildren(body);
  panel.hidden = false;
  // The focus moves to the panel (not its button, which the Enter that
  // opened it would press): Tab reaches the close button, Escape closes.
  panel.tabIndex = -1;
  panel.focus();
}
