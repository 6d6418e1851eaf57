// The decision log: the newest LOG_MAX decisions and notes, newest first.
// Messages only queue here (a bounded ring); the frame builds the rows, at
// most every LOG_EVERY_MS, so a burst of thousands costs LOG_MAX rows.

import { OUTCOME, decisionOutcome } from './messages.js';
import { span } from './dom.js';
import { fmtTime, fmtSeconds, shortId } from './format.js';

export const LOG_MAX = 50;
const BURST_EVERY_MS = 500; // a burst is drawn at most this often: nobody reads faster
const ANIMATE_MAX = 3; // rows added at once that still slide in; more would only flicker

export class Log {
  constructor(el) {
    this.el = el;
    this.pending = new Array(LOG_MAX); // ring of items not drawn yet
    this.head = 0; // items ever queued
    this.drawnUpTo = 0; // items drawn
    this.renderedAt = -Infinity;
    this.countCh = 0; // width of the count column, in digits
  }

  clear() {
    this.head = 0;
    this.drawnUpTo = 0;
    this.el.replaceChildren();
  }

  decision(m) {
    this.push({ decision: m });
  }

  note(ms, text) {
    this.push({ ms: ms, text: text });
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
      const li = it.decision ? decisionRow(it.decision) : noteRow(it.ms, it.text);
      if (n <= ANIMATE_MAX) li.classList.add('is-new');
      frag.append(li);
    }
    this.drawnUpTo = this.head;
    if (n >= LOG_MAX) this.el.replaceChildren(frag);
    else {
      this.el.prepend(frag);
      while (this.el.children.length > LOG_MAX) this.el.lastElementChild.remove();
    }
  }
}

const WHAT = {
  [OUTCOME.ALLOWED]: { cls: 'is-allowed', badge: 'badge-ok', tag: '' },
  [OUTCOME.DENIED]: { cls: 'is-denied', badge: 'badge-bad', tag: '' },
  [OUTCOME.CACHED]: { cls: 'is-denied is-cached', badge: 'badge-bad', tag: 'cached' },
  [OUTCOME.WOULD_DENY]: { cls: 'is-allowed is-would-deny', badge: 'badge-ok', tag: 'shadow' },
};

function decisionRow(m) {
  const outcome = decisionOutcome(m);
  const w = WHAT[outcome];
  const li = document.createElement('li');
  li.className = 'log-entry ' + w.cls;
  li.dataset.testid = 'log-entry';
  const retry = 'Retry-After ' + fmtSeconds(m.retryAfterMs) + ' s';
  let what = 'allowed';
  if (outcome === OUTCOME.DENIED || outcome === OUTCOME.CACHED) what = retry;
  else if (outcome === OUTCOME.WOULD_DENY) what = 'would deny · ' + retry;
  const whatEl = span('log-what', '');
  if (w.tag) {
    const tag = span('log-tag log-tag-' + w.tag, w.tag);
    tag.title = w.tag === 'cached'
      ? 'answered by the instance\'s local deny cache, without a Redis round trip'
      : 'shadow policy: allowed, but enforced it would have been a 429';
    whatEl.append(tag, ' ');
  }
  whatEl.append(what);
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

function noteRow(ms, text) {
  const li = document.createElement('li');
  li.className = 'log-note';
  li.append(span('log-time', fmtTime(ms)), span('log-what', text));
  return li;
}
