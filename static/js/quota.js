// Calendar quotas: each quota in force for the watched window (a rule with
// a period — day, week or month — instead of a window) is a bar filled to
// its count, with when it starts again from 0: the time in the policy's
// zone and how long until then. Each bar is an element `quota` with
// `data-period`, `data-count`, `data-limit` and `data-reset-ms` (the
// period's end, epoch ms on Redis's clock). Counts come from snapshots and
// decisions, the reset from snapshots (nowMs + the rule's resetMs).

import { fmtInt } from './format.js';

const NAMES = { day: 'today', week: 'this week', month: 'this month' };

export class Quotas {
  // root holds the bars; the server renders those of the rules in force.
  constructor(root, writer) {
    this.root = root;
    this.w = writer;
    this.tz = 'UTC';
    this.bars = Array.from(root.querySelectorAll('[data-testid="quota"]'), (el) =>
      bar(el, el.getAttribute('data-period'), Number(el.getAttribute('data-limit')) || 0));
  }

  // setRules keeps the quotas among rules, counted in zone tz. Bars of the
  // same periods and limits stay as they are.
  setRules(rules, tz) {
    this.tz = zone(tz);
    const qs = (rules || []).filter((r) => r && NAMES[r.period] && r.limit > 0);
    const same = qs.length === this.bars.length && qs.every((q, i) => this.bars[i].period === q.period && this.bars[i].limit === q.limit);
    if (same) return;
    const old = new Map(this.bars.map((b) => [b.period, b]));
    this.root.replaceChildren();
    this.bars = qs.map((q) => {
      const was = old.get(q.period);
      const b = bar(newBarElement(q.period), q.period, q.limit);
      if (was) Object.assign(b, { count: was.count, resetAt: was.resetAt });
      this.root.appendChild(b.el);
      return b;
    });
    this.root.hidden = this.bars.length === 0;
  }

  snapshot(m) {
    this.counts(m.rules, (b, r) => {
      if (typeof r.resetMs === 'number' && typeof m.nowMs === 'number') b.resetAt = m.nowMs + r.resetMs;
    });
  }

  decision(m) {
    this.counts(m.rules);
  }

  // counts takes each quota's count (and limit) from a message's rules.
  counts(rules, also) {
    if (!Array.isArray(rules)) return;
    for (const r of rules) {
      const b = r && this.bars.find((x) => x.period === r.period);
      if (!b || typeof r.count !== 'number') continue;
      b.count = r.count;
      if (r.limit > 0) b.limit = r.limit;
      if (also) also(b, r);
    }
  }

  // reset: the window was reset, its quota counters with it.
  reset() {
    for (const b of this.bars) b.count = 0;
  }

  // clear forgets what was reported (another window is watched).
  clear() {
    for (const b of this.bars) Object.assign(b, { count: null, resetAt: null });
  }

  render(t) {
    for (const b of this.bars) {
      // Past its end the period has started again from 0; the next
      // snapshot says when the new one ends.
      const over = b.resetAt !== null && t >= b.resetAt;
      const count = over ? 0 : b.count;
      if (count !== null) this.w.attr(b.el, 'data-count', String(count));
      this.w.attr(b.el, 'data-limit', String(b.limit));
      if (b.resetAt !== null) this.w.attr(b.el, 'data-reset-ms', String(b.resetAt));
      this.w.text(b.parts.count, (count === null ? '–' : fmtInt(count)) + ' / ' + fmtInt(b.limit));
      const pct = count === null || b.limit <= 0 ? 0 : Math.min(100, count / b.limit * 100);
      const width = pct.toFixed(1) + '%';
      if (b.parts.fill.style.width !== width) b.parts.fill.style.width = width;
      this.w.cls(b.el, 'quota' + (count !== null && count >= b.limit ? ' quota-full' : ''));
      this.w.text(b.parts.reset, b.resetAt === null ? '' : over ? 'starting again' : 'resets ' + when(b, this.tz) + ' · in ' + until(b.resetAt - t));
    }
  }
}

function bar(el, period, limit) {
  return {
    el, period, limit, count: null, resetAt: null, label: null,
    parts: { count: el.querySelector('.quota-count'), fill: el.querySelector('.quota-fill'), reset: el.querySelector('.quota-reset') },
  };
}

// newBarElement is what the server renders for a quota (views/index.templ).
function newBarElement(period) {
  const el = document.createElement('div');
  el.className = 'quota';
  el.setAttribute('data-testid', 'quota');
  el.setAttribute('data-period', period);
  const head = document.createElement('span');
  head.className = 'quota-head';
  for (const [cls, text] of [['quota-name', NAMES[period]], ['quota-count', '']]) {
    const s = document.createElement('span');
    s.className = cls;
    s.textContent = text;
    head.appendChild(s);
  }
  const track = document.createElement('span');
  track.className = 'quota-bar';
  track.setAttribute('aria-hidden', 'true');
  const fill = document.createElement('span');
  fill.className = 'quota-fill';
  track.appendChild(fill);
  const reset = document.createElement('span');
  reset.className = 'quota-reset';
  el.append(head, track, reset);
  return el;
}

// when is a bar's reset in the policy's zone: "Mon 00:00 Europe/Berlin"
// for a day or a week, "Mon 1 Dec 00:00 Europe/Berlin" for a month.
// Formatted once per reset.
function when(b, tz) {
  const key = b.resetAt + ' ' + tz;
  if (b.label && b.label.key === key) return b.label.text;
  const opts = { timeZone: tz, weekday: 'short', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' };
  if (b.period === 'month') Object.assign(opts, { day: 'numeric', month: 'short' });
  const parts = {};
  for (const p of new Intl.DateTimeFormat('en-GB', opts).formatToParts(new Date(b.resetAt))) parts[p.type] = p.value;
  const date = b.period === 'month' ? ' ' + parts.day + ' ' + parts.month : '';
  const text = parts.weekday + date + ' ' + parts.hour + ':' + parts.minute + ' ' + tz;
  b.label = { key, text };
  return text;
}

// until writes a time to come: "3 d 4 h", "5 h 12 min", "12 min", "42 s".
export function until(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const d = Math.floor(s / 86400);
  const h = Math.floor(s % 86400 / 3600);
  const m = Math.floor(s % 3600 / 60);
  if (d > 0) return d + ' d ' + h + ' h';
  if (h > 0) return h + ' h ' + m + ' min';
  if (m > 0) return m + ' min';
  return s + ' s';
}

// zone is tz when the browser knows it, else UTC.
function zone(tz) {
  if (typeof tz !== 'string' || tz === '') return 'UTC';
  try {
    new Intl.DateTimeFormat('en-GB', { timeZone: tz });
    return tz;
  } catch (e) {
    return 'UTC';
  }
}
