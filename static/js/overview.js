// The traffic overview: follows /ws/overview and, once a second, writes
// every policy's four rates with a sparkline each and the chosen policy's
// two top lists, each row a link to that client's live window. The server
// renders the first state; the stream keeps it current.

import { MSG, dispatch } from './messages.js';
import { Stream, wsURL } from './stream.js';
import { statusOf, renderStatus } from './status.js';
import { byId, byTestId, Writer } from './dom.js';
import { fmtInt } from './format.js';

const RATES = ['allowed', 'denied', 'shadowDenied', 'cached'];
const COLORS = { allowed: '#16a34a', denied: '#dc2626', shadowDenied: '#d97706', cached: '#7c3aed' };

const root = byTestId('overview');
const policy = root.dataset.policy;
const writer = new Writer();
let redisUp = true;
let latest = null; // the newest overview message, drawn at the next frame
let frame = 0;

const stream = new Stream((m) => dispatch(handlers, m), showStatus);

const handlers = {
  [MSG.STATUS]: (m) => {
    redisUp = m.redis === 'up';
    showStatus();
  },
  [MSG.OVERVIEW]: (m) => {
    if (m.policy !== policy) return;
    latest = m;
    if (!frame) frame = requestAnimationFrame(draw);
  },
};

function showStatus() {
  renderStatus(byId('overview-status'), writer, statusOf(stream.connected, redisUp ? 'up' : 'down', 0));
}

// perSecond writes a rate over the last minute as the server renders it:
// one decimal below 10, and below 0.1/s the count ("3 in the last minute").
function perSecond(r) {
  if (r > 0 && r < 0.1) return fmtInt(r * 60) + ' in the last minute';
  return (r >= 10 ? fmtInt(r) : (Math.round(r * 10) / 10).toFixed(1)) + '/s';
}

function draw() {
  frame = 0;
  const m = latest;
  if (!m) return;
  writer.text(byId('overview-instances'), String(m.instances));
  writer.text(byId('overview-instances-label'), m.instances === 1 ? 'instance' : 'instances');
  for (const p of m.policies || []) {
    const card = byTestId('overview-policy-' + p.name);
    if (!card) continue; // a policy added by a reload: shown on the next load
    for (const r of RATES) {
      const el = card.querySelector('[data-rate="' + r + '"]');
      if (!el) continue;
      writer.text(el.querySelector('.ov-rate-value'), perSecond(p[r]));
      spark(el.querySelector('canvas'), (p.series || {})[r] || [], COLORS[r]);
    }
  }
  const top = m.top || {};
  rows(byTestId('overview-top-checks'), top.checks || []);
  rows(byTestId('overview-top-denied'), top.denied || []);
}

// spark draws one second a bar, oldest left, scaled to the busiest second.
function spark(canvas, counts, color) {
  const dpr = window.devicePixelRatio || 1;
  const W = Math.max(1, canvas.clientWidth);
  const H = Math.max(1, canvas.clientHeight);
  if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
    canvas.width = Math.round(W * dpr);
    canvas.height = Math.round(H * dpr);
  }
  const c = canvas.getContext('2d');
  c.setTransform(dpr, 0, 0, dpr, 0, 0);
  c.clearRect(0, 0, W, H);
  c.fillStyle = '#e5e9f2';
  c.fillRect(0, H - 1, W, 1);
  const max = Math.max(0, ...counts);
  if (max === 0) return;
  const bw = W / counts.length;
  c.fillStyle = color;
  counts.forEach((n, i) => {
    if (n <= 0) return;
    const h = Math.max(1, n / max * (H - 2));
    c.fillRect(i * bw, H - 1 - h, Math.max(1, bw - 0.5), h);
  });
}

// rows rewrites a top list: one link per client, most first, a client with
// its own rules (an override) marked.
function rows(section, list) {
  const ol = section.querySelector('ol');
  const have = ol.children;
  for (let i = 0; i < list.length; i++) {
    let li = have[i];
    if (!li) {
      li = document.createElement('li');
      li.appendChild(newRow());
      ol.appendChild(li);
    }
    const a = li.firstElementChild;
    const r = list[i];
    writer.attr(a, 'href', '/?' + new URLSearchParams({ key: r.key, policy: policy }).toString());
    writer.attr(a, 'data-key', r.key);
    writer.attr(a, 'data-checks', String(r.checks));
    writer.attr(a, 'data-denied', String(r.denied));
    const [key, mark] = a.children[0].children;
    writer.text(key, r.key);
    writer.text(a.children[1], fmtInt(r.checks));
    writer.text(a.children[2], fmtInt(r.denied));
    if (r.override) {
      writer.attr(a, 'data-override', r.override);
      writer.attr(mark, 'title', overrideTitle(r.override));
    } else {
      a.removeAttribute('data-override');
    }
    mark.hidden = !r.override;
  }
  while (have.length > list.length) ol.removeChild(ol.lastElementChild);
  section.querySelector('.ov-empty').hidden = list.length > 0;
}

// newRow is a row as the server renders it (views/overview.templ).
function newRow() {
  const a = document.createElement('a');
  a.className = 'ov-row';
  a.dataset.testid = 'overview-key';
  const who = document.createElement('span');
  who.className = 'ov-who';
  const key = document.createElement('span');
  key.className = 'ov-key';
  const mark = document.createElement('span');
  mark.className = 'chip ov-override';
  mark.textContent = 'override';
  mark.hidden = true;
  who.append(key, mark);
  a.appendChild(who);
  for (const cls of ['ov-num', 'ov-num ov-num-denied']) {
    const s = document.createElement('span');
    s.className = cls;
    a.appendChild(s);
  }
  return a;
}

// overrideTitle says what a row's mark means, as the server writes it.
function overrideTitle(label) {
  return label.startsWith('prefix:')
    ? 'Its own rules: the override of every key starting with ' + label.slice('prefix:'.length)
    : 'Its own rules: an override of this key';
}

stream.open(wsURL('/ws/overview', { policy: policy }));
window.addEventListener('online', () => stream.retry());
showStatus();
