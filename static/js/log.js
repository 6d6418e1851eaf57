// The decision log: the newest LOG_MAX decisions and notes, newest first.
// Messages only queue here (a bounded ring); the frame builds the rows, at
// most every LOG_EVERY_MS, so a burst of thousands costs LOG_MAX rows.

import { OUTCOME, decisionOutcome, recordsEntry } from './messages.js';
import { span } from './dom.js';
import { fmtTime, fmtInt, shortId } from './format.js';
import { adjustText } from './adjust.js';
import { attachExplain, explainable } from './explain-view.js';

export const LOG_MAX = 50;
const BURST_EVERY_MS = 500; // a burst is drawn at most this often: nobody reads faster
const ANIMATE_MAX = 3; // rows added at once that still slide in; more would only flicker

export class Log {
  // el is the list; hint (optional) says how many rows lie below what the
  // list shows, so nobody takes the visible rows for all of them.
  constructor(el, hint) {
    this.el = el;
    this.hint = hint || null;
    this.below = -1; // rows below the visible part, as the hint last said
    if (this.hint) {
      const update = () => this.updateHint();
      el.addEventListener('scroll', update, { passive: true });
      if ('ResizeObserver' in window) new ResizeObserver(update).observe(el);
    }
    this.pending = new Array(LOG_MAX); // ring of items not drawn yet
    this.head = 0; // items ever queued
    this.drawnUpTo = 0; // items drawn
    this.renderedAt = -Infinity;
    this.countCh = 0; // width of the count column, in digits
    // refundable: allowed rows offer a button that takes their entries back
    // (on the sandbox policy, where anyone may); onRefund(id, button) does.
    this.refundable = false;
    this.onRefund = null;
    el.addEventListener('click', (ev) => {
      const b = ev.target instanceof Element ? ev.target.closest('button[data-refund]') : null;
      if (b && !b.disabled && this.onRefund) this.onRefund(b.dataset.refund, b);
    });
    attachExplain(el); // a row opens its decision's explanation
  }

  clear() {
    this.head = 0;
    this.drawnUpTo = 0;
    this.el.replaceChildren();
    this.updateHint();
  }

  // updateHint counts the rows that end below the list's visible part; only
  // when rows change, the list scrolls or resizes (the list is a layout
  // boundary of its own, so reading it is cheap).
  updateHint() {
    if (!this.hint) return;
    const el = this.el;
    const bottom = el.scrollTop + el.clientHeight + 1;
    let n = 0;
    for (let li = el.lastElementChild; li && li.offsetTop + li.offsetHeight > bottom; li = li.previousElementSibling) n++;
    if (n === this.below) return;
    this.below = n;
    this.hint.hidden = n === 0;
    this.hint.dataset.rows = String(n);
    this.hint.textContent = n === 0 ? '' : '↓ ' + n + (n === 1 ? ' more row' : ' more rows') + ' below: scroll the list';
  }

  // empty reports whether nothing was ever queued since the last clear.
  empty() {
    return this.head === 0;
  }

  decision(m) {
    this.push({ decision: m, refund: this.refundable && recordsEntry(m) });
  }

  // adjustment lists a refund or a settle of one check's entries.
  adjustment(m) {
    this.push({ adjustment: m });
  }

  note(ms, text) {
    this.push({ ms: ms, text: text });
  }

  // earlier lists what a snapshot says the window held when this tab
  // opened: one row per recorded request (the entries of a request of cost n
  // share its id), oldest first so the newest ends on top, and a note of how
  // many there were. A window whose algorithm keeps no entries gets the note
  // alone.
  earlier(m) {
    const count = typeof m.count === 'number' ? m.count : 0;
    if (count <= 0) return;
    const list = Array.isArray(m.entries) ? m.entries : [];
    const requests = [];
    for (const e of list) {
      if (!e || typeof e.id !== 'string' || typeof e.ms !== 'number') continue;
      const id = e.id.split(':')[0];
      const last = requests[requests.length - 1];
      if (last && last.id === id) last.cost++;
      else requests.push({ id: id, ms: e.ms, cost: 1 });
    }
    const shown = requests.slice(-LOG_MAX + 1);
    for (const r of shown) this.push({ earlier: r, refund: this.refundable });
    const entries = fmtInt(count) + (count === 1 ? ' entry' : ' entries');
    let text;
    if (list.length === 0) text = fmtInt(count) + ' of ' + fmtInt(m.limit) + ' used when this tab opened, by requests before it';
    else if (shown.length === requests.length && list.length === count) text = entries + ' in the window when this tab opened, recorded before it (below)';
    else text = entries + ' in the window when this tab opened; below, ' + fmtInt(shown.length) + ' of them as Redis listed them';
    this.note(m.nowMs, text);
  }

  push(item) {
    this.pending[this.head % LOG_MAX] = item;
    this.head++;
  }

  // render draws the rows queued since the last time; limit sizes the count
  // column.
  render(limit) {
    if (this.drawnUpTo === this.head) return;
    const p = performance.now();
    const n = Math.min(this.head - this.drawnUpTo, LOG_MAX);
    if (n > ANIMATE_MAX && p - this.renderedAt < BURST_EVERY_MS) return;
    this.renderedAt = p;
    const ch = 2 * String(limit || 0).length + 3;
    if (ch !== this.countCh) {
      this.countCh = ch;
      this.el.style.setProperty('--count-ch', String(ch));
    }
    const frag = document.createDocumentFragment();
    for (let i = this.head - 1; i >= this.head - n; i--) {
      const it = this.pending[i % LOG_MAX];
      const li = it.decision ? decisionRow(it.decision, it.refund) : it.earlier ? earlierRow(it.earlier, it.refund)
        : it.adjustment ? adjustmentRow(it.adjustment) : noteRow(it.ms, it.text);
      if (n <= ANIMATE_MAX) li.classList.add('is-new');
      frag.append(li);
    }
    this.drawnUpTo = this.head;
    if (n >= LOG_MAX) this.el.replaceChildren(frag);
    else {
      this.el.prepend(frag);
      while (this.el.children.length > LOG_MAX) this.el.lastElementChild.remove();
    }
    for (let i = this.head - n; i < this.head; i++) {
      const a = this.pending[i % LOG_MAX].adjustment;
      if (a && a.now === 0) this.refunded(String(a.id));
    }
    this.updateHint();
  }

  // refunded retires the refund buttons of a request none of whose entries
  // is left, whoever took them back.
  refunded(id) {
    for (const b of this.el.querySelectorAll('button[data-refund]')) {
      if (b.dataset.refund !== id) continue;
      b.disabled = true;
      b.textContent = 'refunded';
    }
  }
}

// How each outcome looks: the row's class, the badge (the status the client
// got) and the mark before what it means. A shadow would-deny has its own
// colour: it passed, but enforced it would have been a 429.
const WHAT = {
  [OUTCOME.ALLOWED]: { cls: 'is-allowed', badge: 'badge-ok', mark: '' },
  [OUTCOME.DENIED]: { cls: 'is-denied', badge: 'badge-bad', mark: '' },
  [OUTCOME.CACHED]: { cls: 'is-denied is-cached', badge: 'badge-bad', mark: 'cached' },
  [OUTCOME.WOULD_DENY]: { cls: 'is-would-deny', badge: 'badge-shadow', mark: 'would deny · shadow' },
};

const MARK_TITLE = {
  cached: 'answered by the instance\'s local deny cache, without a Redis round trip',
  'would deny · shadow': 'shadow policy: allowed, but enforced it would have been a 429 with this wait',
  locked: 'this key is locked out: every check is denied until the lock ends, whatever room the window has',
  booked: 'the window was full, but this check could wait: it booked the first moment room frees (its entry is scored then), and the server held its answer until that moment',
};

function decisionRow(m, refund) {
  const outcome = decisionOutcome(m);
  const w = WHAT[outcome];
  const li = document.createElement('li');
  li.className = 'log-entry ' + w.cls;
  li.dataset.testid = 'log-entry';
  if (m.cached) li.dataset.cached = 'true'; // a cached would-deny too
  if (outcome === OUTCOME.WOULD_DENY) li.dataset.wouldDeny = 'true';
  const whatEl = span('log-what', '');
  const marks = w.mark ? [w.mark] : [];
  if (m.cached && outcome === OUTCOME.WOULD_DENY) marks.push('cached');
  if (m.locked) marks.push('locked');
  const waited = typeof m.bookedMs === 'number' && m.bookedMs > m.nowMs ? m.bookedMs - m.nowMs : 0;
  if (waited) marks.push('booked');
  for (const mark of marks) {
    const text = mark === 'locked' && m.lockLevel ? 'locked · level ' + m.lockLevel : mark;
    const tag = span('log-tag log-tag-' + (mark === 'would deny · shadow' ? 'shadow' : mark), text);
    tag.title = MARK_TITLE[mark];
    whatEl.append(tag, ' ');
  }
  // A denial's row keeps the exact wait it was answered with, named as the
  // field it is: the live wait is the ring's (and the Retry-After header its
  // whole seconds, rounded up).
  whatEl.append(outcome === OUTCOME.ALLOWED ? 'allowed' : 'retryAfterMs ' + Math.round(Number(m.retryAfterMs) || 0));
  // A booked check's wait is known when it books: its slot less the moment
  // it asked, which the server holds its answer for.
  if (waited) {
    whatEl.append(' · waited ' + fmtInt(waited) + ' ms');
    li.dataset.bookedMs = String(m.bookedMs);
  }
  if (m.locked) li.dataset.locked = 'true';
  explainable(li, m);
  if (refund) whatEl.append(' ', refundButton(m.id, m.nowMs));
  li.append(
    span('log-time', fmtTime(m.nowMs)),
    span('badge ' + w.badge, m.allowed ? '200' : '429'),
    span('log-count', (m.count ?? '–') + ' / ' + (m.limit ?? '–')),
    whatEl,
  );
  if (m.instance) {
    const inst = span('log-inst', shortId(String(m.instance)));
    inst.title = 'instance ' + m.instance;
    li.append(inst);
  }
  return li;
}

// earlierRow is a request recorded before this tab opened: the page saw no
// decision, only its entry in the window, so it shows what an entry says —
// allowed, at its score.
function earlierRow(r, refund) {
  const li = document.createElement('li');
  li.className = 'log-entry is-allowed is-earlier';
  li.dataset.testid = 'log-entry';
  li.dataset.earlier = 'true';
  li.dataset.id = r.id;
  explainable(li, { earlier: r });
  const tag = span('log-tag log-tag-earlier', 'before this tab');
  tag.title = 'recorded before this tab opened: read from the window in Redis, not seen as a decision';
  const whatEl = span('log-what', '');
  whatEl.append(tag, ' allowed' + (r.cost > 1 ? ' · cost ' + r.cost : ''));
  if (refund) whatEl.append(' ', refundButton(r.id, r.ms));
  li.append(span('log-time', fmtTime(r.ms)), span('badge badge-ok', '200'), span('log-count', ''), whatEl);
  return li;
}

// refundButton offers to take a request's entries back (POST /api/v1/refund).
function refundButton(id, ms) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'log-refund';
  b.dataset.testid = 'log-refund';
  b.dataset.refund = id;
  b.textContent = 'refund';
  b.title = 'Take this request\'s entries back: POST /api/v1/refund with its id ' + id;
  b.setAttribute('aria-label', 'refund the request of ' + fmtTime(ms));
  return b;
}

// adjustmentRow is a refund or a settle of one check's entries, by whoever
// called POST /api/v1/refund or /settle.
function adjustmentRow(m) {
  const li = document.createElement('li');
  li.className = 'log-entry is-adjustment';
  li.dataset.testid = 'log-entry';
  li.dataset.kind = String(m.kind);
  li.dataset.id = String(m.id);
  const what = span('log-what', adjustText(m) + ' ');
  const id = span('log-id', shortId(String(m.id)));
  id.title = 'the request\'s id: ' + m.id;
  what.append(id);
  li.append(
    span('log-time', fmtTime(m.nowMs)),
    span('badge badge-adjust', String(m.kind)),
    span('log-count', (m.count ?? '–') + ' / ' + (m.limit ?? '–')),
    what,
  );
  if (m.instance) {
    const inst = span('log-inst', shortId(String(m.instance)));
    inst.title = 'instance ' + m.instance;
    li.append(inst);
  }
  return li;
}

function noteRow(ms, text) {
  const li = document.createElement('li');
  li.className = 'log-note';
  li.append(span('log-time', fmtTime(ms)), span('log-what', text));
  return li;
}
