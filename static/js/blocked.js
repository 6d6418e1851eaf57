// Why the watched window refuses a request now: the last denial's
// Retry-After, or a lock. A policy with a lock (`+lock=15m`) locks a key once
// it denies it: every check is then denied until the lock ends, however much
// room the window has. The ring counts down whichever holds, the lock first;
// the lock also shows as its own element (testid `lock`, `data-until` = its
// end in epoch ms), present only while it holds.
//
// The page learns of a lock from decisions (`locked`, `lockLevel`,
// `lockUntilMs`): a tab that opens during a lock shows it with the next one.

import { OUTCOME, decisionOutcome } from './messages.js';
import { fmtUTC } from './format.js';
import { renderWaits } from './wait.js';

export class Blocked {
  // slot is where the lock element goes while a lock holds.
  constructor(slot) {
    this.slot = slot;
    this.denial = null; // {retryAt, total} after a 429 that leaves no room, in Redis ms
    this.lock = null; // {until, level, total} while the key is locked
    this.el = null; // the lock element, while shown
    // The live waits of "Try it" (wait.js) count down what the ring does.
    this.waits = document.querySelector('.results') || document;
  }

  // clear forgets both (another window is watched, or it was reset).
  clear() {
    this.denial = null;
    this.lock = null;
    this.show(null);
  }

  decision(m) {
    const o = decisionOutcome(m);
    if (o === OUTCOME.ALLOWED) {
      this.clear();
      return;
    }
    if (m.locked && typeof m.lockUntilMs === 'number' && typeof m.nowMs === 'number') {
      const same = this.lock && this.lock.until === m.lockUntilMs;
      this.lock = {
        until: m.lockUntilMs,
        level: Number(m.lockLevel) || 1,
        total: same ? this.lock.total : Math.max(1, m.lockUntilMs - m.nowMs),
      };
    } else if (o !== OUTCOME.WOULD_DENY) {
      this.lock = null; // decided without a lock: none holds
    }
    // The window is blocked when a denial says even one more request has no
    // room (a costly request denied beside cheap ones that pass is not), and
    // always when the key is locked.
    const full = !(typeof m.count === 'number' && typeof m.limit === 'number' && m.count < m.limit);
    if ((o === OUTCOME.DENIED && (full || m.locked)) || o === OUTCOME.CACHED) {
      const retry = Math.max(0, Number(m.retryAfterMs) || 0);
      this.denial = { retryAt: m.nowMs + retry, total: retry };
    }
  }

  // adjustment: a refund or settle that leaves room in every rule (the
  // binding rule's count below its limit) ends a denial's wait; a lock
  // holds until its end whatever the window holds.
  adjustment(m) {
    if (typeof m.count === 'number' && typeof m.limit === 'number' && m.count < m.limit) this.denial = null;
  }

  // locked reports whether the lock holds at t (Redis ms); a lock that ended
  // is forgotten.
  locked(t) {
    if (this.lock && this.lock.until <= t) this.lock = null;
    return this.lock !== null;
  }

  // verdict is what the count readout says of the window at t: 'locked',
  // 'blocked' or '' when a request may pass.
  verdict(t) {
    if (this.locked(t)) return 'locked';
    return this.denial !== null && this.denial.retryAt > t ? 'blocked' : '';
  }

  // ring is the countdown the ring shows at t: the lock's while it holds,
  // then what is left of the denial's Retry-After (the window may still be
  // full after a short lock), else null.
  ring(t) {
    if (this.locked(t)) return { retryAt: this.lock.until, total: this.lock.total, locked: true };
    return this.denial;
  }

  // render shows the lock element while the lock holds at t, and takes it
  // away at its end; the waits of "Try it" follow the ring.
  render(t) {
    this.show(this.locked(t) ? this.lock : null);
    renderWaits(this.waits, t, this.ring(t));
  }

  show(lock) {
    if (!lock) {
      if (this.el) this.el.remove();
      this.el = null;
      return;
    }
    if (this.el && this.el.dataset.until === String(lock.until) && this.el.dataset.level === String(lock.level)) return;
    const el = document.createElement('p');
    el.className = 'lock';
    el.dataset.testid = 'lock';
    el.dataset.until = String(lock.until);
    el.dataset.level = String(lock.level);
    el.title = 'This key is locked out: every check on this policy is denied until the lock ends, ' +
      'whatever room the window has. Each new lock within a day of the last doubles its time.';
    const title = document.createElement('strong');
    title.className = 'lock-title';
    title.textContent = 'locked · level ' + lock.level;
    const until = document.createElement('span');
    until.className = 'lock-until';
    until.textContent = 'until ' + fmtUTC(lock.until) + ' UTC';
    el.append(title, ' ', until);
    if (this.el) this.el.replaceWith(el);
    else this.slot.append(el);
    this.el = el;
  }
}
