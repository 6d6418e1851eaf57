// The race demo: naive check-then-act against the atomic script,
// on the sandbox policy only. Outcomes arrive as the HTTP answer and as a
// `race` message to every viewer; the frame draws the newest of each mode.

import { api, problemText } from './api.js';
import { toast } from './toast.js';

export class Race {
  // ui: {naive, atomic, result, hint}; win() returns the watched {key,
  // policy}; races run on the sandbox policy alone.
  constructor(ui, win, sandbox) {
    this.ui = ui;
    this.win = win;
    this.sandbox = sandbox;
    this.busy = false;
    this.pending = { naive: null, atomic: null };
    ui.naive.addEventListener('click', () => this.run('naive'));
    ui.atomic.addEventListener('click', () => this.run('atomic'));
  }

  // availability enables the buttons on the sandbox policy only.
  availability() {
    const onDemo = this.win().policy === this.sandbox;
    this.ui.naive.disabled = !onDemo || this.busy;
    this.ui.atomic.disabled = !onDemo || this.busy;
    this.ui.hint.hidden = onDemo;
  }

  clear() {
    this.pending = { naive: null, atomic: null };
    for (const line of this.ui.result.querySelectorAll('.race-line')) {
      line.querySelector('.race-text').textContent = '';
      line.classList.remove('has-result', 'has-overshoot', 'is-running');
    }
  }

  // show queues an outcome for the next frame.
  show(r) {
    if (r && (r.mode === 'naive' || r.mode === 'atomic')) this.pending[r.mode] = r;
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
    return this.ui.result.querySelector('.race-line[data-mode="' + (mode === 'naive' ? 'naive' : 'atomic') + '"]');
  }

  // render draws each queued outcome as text and a bar: allowed within the
  // limit, then the overshoot past the limit marker.
  render() {
    for (const mode of ['naive', 'atomic']) {
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

export function raceText(r) {
  let verdict = 'within the limit';
  if (r.overshoot > 0) verdict = 'overshoot ' + r.overshoot;
  else if (r.allowed === r.limit) verdict = 'exact';
  return r.mode + ': ' + r.allowed + ' of ' + r.requests + ' allowed, limit ' + r.limit +
    ' — ' + verdict + ' (' + r.durationMs + ' ms)';
}
