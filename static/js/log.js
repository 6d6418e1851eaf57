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
  'would deny · shadow': 'shadow policy: allowed, but enforced it would have been a 429 with this Retry-After',
};

function decisionRow(m) {
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
  for (const mark of marks) {
    const tag = span('log-tag log-tag-' + (mark === 'cached' ? 'cached' : 'shadow'), mark);
    tag.title = MARK_TITLE[mark];
    whatEl.append(tag, ' ');
  }
  whatEl.append(outcome === OUTCOME.ALLOWED ? 'allowed' : 'Retry-After ' + fmtSeconds(m.retryAfterMs) + ' s');
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
