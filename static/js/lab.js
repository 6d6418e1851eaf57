// The lab page: sends the chosen traffic as real POSTs and draws
// what /ws/lab reports — every request, from any tab, decided by every
// algorithm — in one lane per algorithm on a shared time axis. It shares the
// main page's clock, status, stream and facts.

import { MSG, dispatch } from './messages.js';
import { Stream, wsURL } from './stream.js';
import { Clock } from './clock.js';
import { statusOf, renderStatus } from './status.js';
import { byId, byTestId, Writer } from './dom.js';
import { fmtDuration } from './format.js';
import { readFacts, keyPattern } from './facts.js';
import { loadAlgorithms } from './algorithms.js';
import { LabModel, summary } from './lab-model.js';
import { onAnswer, reset, run, useToken } from './lab-traffic.js';
import { renderBoundary } from './lab-explain.js';

const root = byTestId('lab');
const facts = readFacts(root);
const algorithms = facts.algorithms.map((a) => a.name);
const model = new LabModel(algorithms);
const NAME_RE = keyPattern(facts);
const BOUNDARY_TRIES = 3;

const form = byId('lab-form');
const nameInput = byId('lab-name');
const limitInput = byTestId('lab-limit');
const windowInput = byTestId('lab-window');
const trafficSelect = byTestId('lab-traffic');
const runButton = byTestId('lab-run');
const tokenInput = byId('lab-token'); // only when the lab needs the API token

let lab = root.dataset.lab;
const limiterClock = new Clock(); // from the ticks
const writer = new Writer();
let redisUp = true;
let traffic = trafficSelect.value;
let running = false;
let drawn = -1;
let frame = 0;

// clock estimates the limiter's clock (Redis TIME) now.
function clock() {
  return limiterClock.known() ? limiterClock.now() : Date.now();
}

const stream = new Stream(onMessage, showStatus);
onAnswer((m) => {
  if (m && m.lab === lab && model.add(m)) schedule();
});

const handlers = {
  [MSG.HELLO]: (m) => stream.healthy(m.tickMs),
  [MSG.STATUS]: (m) => {
    redisUp = m.redis === 'up';
    showStatus();
  },
  [MSG.TICK]: (m) => limiterClock.sync(m.nowMs),
  [MSG.VIEWERS]: (m) => {
    byId('lab-viewers').textContent = String(m.count);
  },
  [MSG.LAB]: (m) => {
    if (m.lab === lab && model.add(m)) schedule();
  },
  // A tab that joins (or reloads) draws the lab's recent requests.
  [MSG.LAB_SNAPSHOT]: (m) => {
    if (m.lab !== lab || !Array.isArray(m.requests)) return;
    let added = false;
    for (const r of m.requests) added = model.add(r) || added;
    if (added) schedule();
  },
  [MSG.LAB_RESET]: (m) => {
    if (m.lab !== lab) return;
    model.resetAt(m.nowMs);
    schedule();
  },
};

function onMessage(m) {
  dispatch(handlers, m);
}

function showStatus() {
  renderStatus(byId('lab-status'), writer, statusOf(stream.connected, redisUp ? 'up' : 'down', 0));
}

function watch() {
  stream.open(wsURL('/ws/lab', { lab: lab }));
}

function schedule() {
  if (!frame) frame = requestAnimationFrame(render);
}

// render redraws the lanes when the model changed: at most once a frame.
function render() {
  frame = 0;
  if (drawn === model.version) return;
  drawn = model.version;
  const stats = model.stats();
  const axis = model.axis();
  drawAxis(axis);
  for (const alg of algorithms) {
    const lane = byTestId('lab-lane-' + alg);
    const s = stats[alg];
    byTestId('lab-count-' + alg).textContent = String(s.allowed);
    const max = byTestId('lab-max-' + alg);
    max.textContent = String(s.max);
    max.classList.toggle('lab-over', model.limit > 0 && s.max > model.limit);
    lane.replaceChildren(laneContent(alg, axis, s));
  }
  if (model.limit) byId('lab-rule').textContent = model.limit + ' per ' + model.windowMs / 1000 + ' s';
  byId('lab-summary').textContent = model.requests.length
    ? summary(model, stats, traffic)
    : 'No requests yet on this lab: pick a rule and a traffic shape, then run it.';
  renderBoundary(byTestId('lab-explain'), model, stats, traffic);
}

// x places a time on the axis, in percent.
function x(axis, ms) {
  return ((ms - axis.start) / (axis.end - axis.start)) * 100;
}

// drawAxis marks the axis every round step (1, 2 or 5 × a power of ten ms,
// six to ten of them), each labelled by its time after the first request.
function drawAxis(axis) {
  const scale = byId('lab-axis');
  const frag = document.createDocumentFragment();
  if (axis) {
    const step = niceStep((axis.end - axis.start) / 6);
    const origin = model.requests[0].nowMs;
    const from = origin + Math.ceil((axis.start - origin) / step) * step;
    for (let t = from; t <= axis.end; t += step) {
      const tick = document.createElement('span');
      tick.className = 'lab-tick' + (t === from && x(axis, t) < 3 ? ' lab-tick-first' : t + step > axis.end && x(axis, t) > 97 ? ' lab-tick-last' : '');
      tick.style.left = x(axis, t) + '%';
      tick.textContent = (t < origin ? '−' : '+') + fmtDuration(Math.abs(t - origin));
      frag.appendChild(tick);
    }
  }
  scale.replaceChildren(frag);
}

// niceStep is the smallest of 1, 2, 5 × 10^k ms not under ms.
function niceStep(ms) {
  const p = Math.pow(10, Math.floor(Math.log10(Math.max(1, ms))));
  for (const m of [1, 2, 5, 10]) if (m * p >= ms) return m * p;
  return 10 * p;
}

function laneContent(alg, axis, s) {
  const frag = document.createDocumentFragment();
  if (!axis) return frag;
  // Every fixed-window edge on the axis (they are multiples of the window).
  for (let t = (Math.floor(axis.start / axis.windowMs) + 1) * axis.windowMs; t < axis.end; t += axis.windowMs) {
    const edge = document.createElement('i');
    edge.className = 'lab-edge';
    edge.style.left = x(axis, t) + '%';
    frag.appendChild(edge);
  }
  if (s.max > 0) {
    const band = document.createElement('i');
    band.className = 'lab-busiest' + (s.max > model.limit ? ' lab-busiest-over' : '');
    const from = Math.max(axis.start, s.maxToMs - model.windowMs);
    band.style.left = x(axis, from) + '%';
    band.style.width = x(axis, s.maxToMs) - x(axis, from) + '%';
    band.title = s.max + ' allowed in this window';
    frag.appendChild(band);
  }
  let prev = -Infinity; // marks closer than a mark's width are stacked
  let k = 0;
  for (const r of model.requests) {
    const d = r.results[alg];
    if (!d) continue;
    const left = x(axis, r.nowMs);
    k = left - prev < 0.6 ? k + 1 : 0;
    if (k === 0) prev = left;
    const mark = document.createElement('i');
    mark.className = 'lab-mark ' + (d.allowed ? 'lab-ok' : 'lab-no') + (model.differs(r, alg) ? ' lab-diff' : '');
    mark.dataset.testid = 'lab-mark';
    mark.dataset.allowed = String(d.allowed);
    mark.dataset.id = r.id;
    mark.dataset.ms = String(r.nowMs);
    mark.style.left = left + '%';
    mark.style.top = 4 + (k % 5) * 8 + 'px';
    mark.title = (d.allowed ? 'allowed' : 'denied, retry in ' + d.retryAfterMs + ' ms') + ' at ' + r.nowMs;
    frag.appendChild(mark);
  }
  return frag;
}

// clockKnown waits (up to 3 s) for a tick: the boundary is an edge on the
// limiter's clock, not this browser's.
async function clockKnown() {
  for (let i = 0; !limiterClock.known() && i < 60; i++) {
    progress('waiting for the limiter’s clock');
    await new Promise((r) => setTimeout(r, 50));
  }
}

function showError(msg) {
  const el = byId('lab-error');
  el.textContent = msg;
  el.hidden = !msg;
}

function progress(msg) {
  byId('lab-progress').textContent = msg;
}

// readForm validates the controls; null when one is wrong (shown).
function readForm() {
  const name = nameInput.value.trim();
  const limit = Number(limitInput.value);
  const secs = Number(windowInput.value);
  if (!NAME_RE.test(name)) return showError('lab: ' + facts.keyHint), null;
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) return showError('limit: a whole number from 1 to 100'), null;
  if (!Number.isInteger(secs) || secs < 1 || secs > 60) return showError('window: whole seconds from 1 to 60'), null;
  showError('');
  return { name: name, limit: limit, windowMs: secs * 1000, secs: secs, traffic: trafficSelect.value };
}

// remember puts the lab and its rule in the address bar, so the URL can be
// shared into another tab.
function remember(f) {
  const q = new URLSearchParams({ lab: f.name, limit: String(f.limit), window: String(f.secs), traffic: f.traffic });
  history.replaceState(null, '', '/lab?' + q.toString());
}

async function runTraffic(ev) {
  ev.preventDefault();
  if (running) return;
  const f = readForm();
  if (!f) return;
  if (tokenInput) {
    if (!tokenInput.value.trim()) return showError('this lab needs the API token: enter it first');
    useToken(tokenInput.value.trim());
  }
  remember(f);
  if (f.name !== lab) {
    lab = f.name;
    model.clear();
    schedule();
    watch();
  }
  traffic = f.traffic;
  running = true;
  runButton.disabled = true;
  try {
    if (f.traffic === 'boundary') await clockKnown();
    for (let attempt = 1; ; attempt++) {
      progress('resetting the lab');
      await reset(lab);
      model.clear(); // nothing of this run is sent yet; the stream's reset keeps what follows
      schedule();
      const ok = await run(f.traffic, lab, f.limit, f.windowMs, clock, progress);
      if (ok || attempt >= BOUNDARY_TRIES) {
        progress(ok ? 'done' : 'done, but the machine was too busy to hit the edge exactly');
        break;
      }
      progress('a burst missed its side of the edge; trying the next one');
    }
  } catch (e) {
    showError(e.message);
    progress('');
  } finally {
    running = false;
    runButton.disabled = false;
    schedule();
  }
}

form.addEventListener('submit', runTraffic);
trafficSelect.addEventListener('change', () => {
  traffic = trafficSelect.value;
});
const initial = readForm();
if (initial) remember(initial);
watch();
drawn = -1;
schedule();
// The words of the summary come with each algorithm's module.
loadAlgorithms(facts.algorithms).then(() => {
  drawn = -1;
  schedule();
});
