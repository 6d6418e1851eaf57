// The race demo, on the sandbox policy only: naive check-then-act against
// the atomic script, and for outcomes (only failed logins count) peek, then
// record against check, then keep. Outcomes arrive as the HTTP answer and as
// a `race` message to every viewer; the frame draws the newest of each mode.

import { api, problemText } from './api.js';
import { toast } from './toast.js';

// MODES are the race's modes, as POST /api/v1/race names them. In the
// outcome modes each request is a login that fails: `allowed` counts the
// ones that reached the handler.
export const MODES = Object.freeze(['naive', 'atomic', 'peekrecord', 'reserverefund']);
const OUTCOME_MODES = new Set(['peekrecord', 'reserverefund']);

export class Race {
  // ui: {buttons: {mode: button}, result, hint}; win() returns the watched
  // {key, policy}; races run on the sandbox policy alone.
  constructor(ui, win, sandbox) {
    this.ui = ui;
    this.win = win;
    this.sandbox = sandbox;
    this.busy = false;
    this.pending = {};
    for (const mode of MODES) {
      const b = ui.buttons[mode];
      if (b) b.addEventListener('click', () => this.run(mode));
    }
  }

  // availability enables the buttons on the sandbox policy only.
  availability() {
    const onDemo = this.win().policy === this.sandbox;
    for (const b of Object.values(this.ui.buttons)) if (b) b.disabled = !onDemo || this.busy;
    this.ui.hint.hidden = onDemo;
  }

  clear() {
    this.pending = {};
    for (const line of this.ui.result.querySelectorAll('.race-line')) {
      line.querySelector('.race-text').textContent = '';
      line.classList.remove('has-result', 'has-overshoot', 'is-running');
    }
  }

  // show queues an outcome for the next frame.
  show(r) {
    if (r && MODES.includes(r.mode)) this.pending[r.mode] = r;
  }

  async run(mode) {
    const w = this.win();
    if (w.policy !== this.sandbox || this.busy) return;
    this.busy = true;
    this.availability();
    const line = this.line(mode);
    line.classList.add('is-running');
    try {
      const { res, data } = await api('POST', '/api/v1/race', { key: w.key, mode: mode });
      if (res.ok && data) this.show(data);
      else toast('Race failed: ' + (res.status === 409 ? 'a race is already running on this window' : problemText(res, data)));
    } catch (e) {
      toast('Race failed: ' + e.message);
    } finally {
      line.classList.remove('is-running');
      this.busy = false;
      this.availability();
    }
  }

  line(mode) {
    return this.ui.result.querySelector('.race-line[data-mode="' + (MODES.includes(mode) ? mode : 'naive') + '"]');
  }

  // render draws each queued outcome as text and a bar: allowed within the
  // limit, then the overshoot past the limit marker.
  render() {
    for (const mode of MODES) {
      const r = this.pending[mode];
      if (!r) continue;
      this.pending[mode] = null;
      const line = this.line(mode);
      line.querySelector('.race-text').textContent = raceText(r);
      line.classList.toggle('has-overshoot', r.overshoot > 0);
      line.classList.add('has-result');
      const scale = Math.max(r.allowed, r.limit * 2, 1);
      const pct = (n) => (100 * n / scale).toFixed(2) + '%';
      line.querySelector('.race-fill').style.width = pct(Math.min(r.allowed, r.limit));
      line.querySelector('.race-over').style.width = pct(Math.max(0, r.allowed - r.limit));
      line.querySelector('.race-limit').style.left = pct(r.limit);
    }
  }
}

// raceText sums up an outcome: "naive: 37 of 200 allowed, limit 5 —
// overshoot 32 (104 ms)"; the outcome modes count the failed logins that
// reached the handler.
export function raceText(r) {
  let verdict = 'within the limit';
  if (r.overshoot > 0) verdict = 'overshoot ' + r.overshoot;
  else if (r.allowed === r.limit) verdict = 'exact';
  const passed = OUTCOME_MODES.has(r.mode) ? ' reached the handler' : ' allowed';
  return r.mode + ': ' + r.allowed + ' of ' + r.requests + passed + ', limit ' + r.limit +
    ' — ' + verdict + ' (' + r.durationMs + ' ms)';
}
