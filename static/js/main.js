// ratescope visualizer: animates the server-rendered page from the WebSocket
// stream of one window. Everything shown comes from the server (stream
// messages and HTTP answers); the page interpolates Redis's clock between
// ticks and moves the entries it was told about.
//
// Messages only update compact state (O(1), or O(its entries) for a
// snapshot); the page is drawn at most once per animation frame, from that
// state, and while the tab is hidden once a second.

import { MSG, dispatch } from './messages.js';
import { byTestId, byId, Writer, drawEveryFrame } from './dom.js';
import { ruleLabel, fmtUTC } from './format.js';
import { Clock } from './clock.js';
import { Stream, wsURL } from './stream.js';
import { WindowModel } from './window-model.js';
import { AlgoModel } from './algo-model.js';
import { loadAlgorithms, algorithm } from './algorithms.js';
import { readFacts, keyPattern, redisKey, parseList, policyByName } from './facts.js';
import { AlgoView, renderAlgoRing } from './algo-view.js';
import { Timeline } from './timeline.js';
import { Ring } from './ring.js';
import { CountReadout, bindingRule } from './count.js';
import { Log } from './log.js';
import { Rate } from './rate.js';
import { Race, raceText } from './race.js';
import { Blocked } from './blocked.js';
import { bindActions, clearActions, refundFrom, releaseFrom, INFLIGHT } from './actions.js';
import { Leases, leaseNote, LEASES_CAPTION } from './leases.js';
import { statusOf, renderStatus } from './status.js';
import { toastInto } from './toast.js';
import { Quotas } from './quota.js';
import { OverrideLine } from './override.js';

async function init() {
  const app = byId('app');
  if (!app) return;
  const facts = readFacts(app);
  const KEY_RE = keyPattern(facts);
  // The default algorithm is the first the server lists.
  const DEFAULT = facts.algorithms.length ? facts.algorithms[0].name : '';
  await loadAlgorithms(facts.algorithms);
  // entries reports whether an algorithm keeps one entry per request: the
  // timeline draws entries then, and the algorithm's state otherwise.
  const entries = (name) => !!(algorithm(name) && algorithm(name).entries);
  const state = {
    key: app.dataset.key || facts.sandbox,
    policy: app.dataset.policy || facts.sandbox,
    policies: parseList(app.dataset.policies),
    algorithm: DEFAULT, // how the watched policy keeps its windows
    shadow: false,
    rules: [], // [{limit, windowMs, label}]: the windows in force for the watched key
    policyLabel: '', // the watched policy's own rules, for people
    timezone: 'UTC', // the zone the policy's calendar quotas count in
    redis: 'unknown',
    viewers: null,
    instance: '',
    reported: { count: null, limit: null }, // the last count/limit pair the server sent
    listedEarlier: false, // the log has had its chance to list the entries before this tab
  };
  const ui = {
    clock: byTestId('clock'),
    clockUTC: byTestId('clock-utc'),
    status: byTestId('status'),
    viewers: byTestId('viewers'),
    viewersLabel: byId('viewers-label'),
    key: byTestId('key'),
    policy: byTestId('policy'),
    picker: byId('picker'),
    keyError: byId('key-error'),
    rulesLabel: byId('rules-label'),
    streamInstance: byId('stream-instance'),
    streamInstanceWrap: byId('stream-instance-wrap'),
    zsetKeys: document.querySelectorAll('#zset-key, #zset-key-2, #zset-key-3'),
    algorithm: byTestId('algorithm'),
    algoCaption: byId('algo-caption'),
    windowCard: byId('window-card'),
    countLabel: byId('count-label'),
    redisKeyLabel: byId('redis-key-label'),
    timeline: byTestId('timeline'),
  };
  const w = new Writer();
  toastInto(byId('toasts'));
  const clock = new Clock();
  const model = new WindowModel();
  const timeline = new Timeline({
    timeline: byTestId('timeline'),
    cutoff: byTestId('cutoff'),
    plot: byId('tl-plot'),
    strip: byId('tl-entries'),
    canvas: byId('tl-canvas'),
    caption: byId('tl-caption'),
    axisStart: byId('axis-start'),
    axisEnd: byId('axis-end'),
  }, w);
  const leases = new Leases({ root: byId('tl-leases'), caption: byId('tl-caption') }, w);
  const algo = new AlgoModel();
  const algoView = new AlgoView({
    timeline: byTestId('timeline'), plot: byId('tl-plot'), canvas: byId('tl-algo'), caption: byId('tl-caption'),
  }, w);
  const ring = new Ring({
    ring: byTestId('ring'), wrap: byId('ring-wrap'), bar: byId('ring-bar'), value: byId('ring-value'), label: byId('ring-label'),
  }, w);
  const counter = new CountReadout({ count: byTestId('count'), verdict: byId('verdict'), rules: byId('rule-counts') }, w);
  const log = new Log(byTestId('log'), byTestId('log-more'));
  const blocked = new Blocked(byId('lock-slot')); // a denial's Retry-After, or a lock
  const rate = new Rate({ root: byTestId('rate'), text: byId('rate-text'), canvas: byId('rate-spark') }, w);
  const quotas = new Quotas(byId('quotas'), w);
  const override = new OverrideLine(byTestId('override'), w);
  const win = () => {
    const r = bindingRule(state.rules);
    return { key: state.key, policy: state.policy, limit: r ? r.limit : state.reported.limit || 0, algorithm: state.algorithm };
  };
  const race = new Race({
    buttons: {
      naive: byTestId('race-naive'), atomic: byTestId('race-atomic'),
      peekrecord: byTestId('race-peekrecord'), reserverefund: byTestId('race-reserverefund'),
    },
    result: byTestId('race-result'), hint: byId('race-hint'),
  }, win, facts.sandbox);
  const actions = {
    send: byTestId('send'),
    boundary: byTestId('boundary-test'),
    boundaryResult: byTestId('boundary-result'),
    reset: byTestId('reset'),
    sendResult: byId('send-result'),
    wait: byTestId('wait'),
    waitField: byId('wait-field'),
  };
  const lastRequest = bindActions(actions, win); // follows every check on the window
  log.onRefund = refundFrom(win);
  leases.onRelease = releaseFrom(win);

  // ---------- messages ----------

  const forThisWindow = (m) => m.key === state.key && m.policy === state.policy;
  const handlers = {
    [MSG.HELLO]: (m) => {
      stream.healthy(m.tickMs);
      if (typeof m.timezone === 'string') state.timezone = m.timezone;
      inForce(m);
      if (m.instance) state.instance = String(m.instance);
      if (typeof m.algorithm === 'string') setAlgorithm(m.algorithm, !!m.shadow);
    },
    [MSG.OVERRIDE]: (m) => {
      if (forThisWindow(m)) inForce(m);
    },
    [MSG.STATUS]: (m) => {
      state.redis = m.redis === 'down' ? 'down' : 'up';
    },
    [MSG.TICK]: (m) => clock.sync(m.nowMs),
    [MSG.SNAPSHOT]: (m) => {
      if (!forThisWindow(m)) return;
      state.reported = { count: num(m.count), limit: num(m.limit) };
      if (state.algorithm === INFLIGHT) return leases.snapshot(m);
      // The first snapshot lists what the window held before this tab
      // opened, unless decisions already filled the log.
      if (!state.listedEarlier) {
        state.listedEarlier = true;
        if (log.empty()) log.earlier(m);
      }
      model.snapshot(m);
      quotas.snapshot(m);
      if (!entries(state.algorithm)) algo.snapshot(m);
    },
    [MSG.DECISION]: (m) => {
      if (!forThisWindow(m)) return;
      model.decision(m);
      quotas.decision(m);
      if (!entries(state.algorithm)) algo.decision(m);
      log.decision(m);
      rate.decision(m);
      state.reported = { count: num(m.count), limit: num(m.limit) };
      blocked.decision(m);
      lastRequest(m);
    },
    [MSG.ADJUSTMENT]: (m) => {
      if (!forThisWindow(m)) return;
      model.adjustment(m);
      log.adjustment(m);
      blocked.adjustment(m);
      state.reported = { count: num(m.count), limit: num(m.limit) };
    },
    [MSG.RESET]: (m) => {
      if (!forThisWindow(m)) return;
      model.reset(m.nowMs);
      algo.reset(m.nowMs);
      leases.reset();
      quotas.reset();
      blocked.clear();
      state.reported = { count: 0, limit: state.reported.limit };
      log.note(m.nowMs, 'window reset');
    },
    [MSG.RACE]: (m) => {
      if (!forThisWindow(m)) return;
      blocked.clear();
      race.show(m);
      log.note(clock.now(), 'race ' + raceText(m));
    },
    [MSG.LEASE]: (m) => {
      if (!forThisWindow(m) || state.algorithm !== INFLIGHT) return;
      leases.lease(m);
      log.note(m.nowMs, leaseNote(m));
    },
    [MSG.VIEWERS]: (m) => {
      state.viewers = Number(m.count) || 0;
    },
  };
  const stream = new Stream((m) => {
    if (!clock.known() && typeof m.nowMs === 'number') clock.sync(m.nowMs);
    dispatch(handlers, m);
  }, () => {
    if (stream.connected) {
      state.redis = 'unknown';
      model.reconnected();
      clock.lagReset();
    }
  });

  // ---------- which window ----------

  // setRules takes the rules in force: the windows drive the timeline and
  // the count, the calendar quotas their bars.
  function setRules(rules) {
    state.rules = rules
      .filter((r) => r && r.limit > 0 && r.windowMs > 0)
      .map((r) => ({ limit: r.limit, windowMs: r.windowMs, label: r.label || ruleLabel(r) }));
    model.setRules(state.rules);
    quotas.setRules(rules, state.timezone);
  }

  // inForce takes what hello or an override message says of the rules in
  // force for the key (an override's, m.override, when one applies), labelled
  // as the policy names them.
  function inForce(m) {
    override.show(m.override || null);
    if (!Array.isArray(m.rules) || !m.rules.length) return;
    const known = policyByName(state.policies, state.policy);
    const labels = known && Array.isArray(known.rules) ? known.rules : [];
    setRules(m.rules.map((r) => {
      const same = labels.find((l) => l.limit === r.limit && l.windowMs === r.windowMs && (l.period || '') === (r.period || ''));
      return { limit: r.limit, windowMs: r.windowMs || 0, period: r.period, label: same ? same.label : '' };
    }));
  }

  // setAlgorithm names the watched policy's algorithm on the page and picks
  // the timeline that draws it: entries for the log, the state otherwise.
  function setAlgorithm(name, shadow) {
    const a = name || DEFAULT;
    if (a !== state.algorithm) {
      algo.clear();
      algoView.clear();
      leases.clear();
      if (!entries(a)) timeline.clear();
    }
    const inflight = a === INFLIGHT;
    // A window of leases takes leases: "send" takes one; waiting is the log's.
    w.text(actions.send, inflight ? 'Take a lease' : 'Send a request');
    actions.wait.disabled = a !== 'log';
    actions.waitField.hidden = inflight;
    state.algorithm = a;
    state.shadow = shadow;
    log.refundable = state.policy === facts.sandbox && entries(a); // anyone may refund on the sandbox
    algo.setAlgorithm(a);
    w.text(ui.algorithm, a + (shadow ? ' · shadow' : ''));
    w.text(ui.algoCaption, algorithm(a) ? algorithm(a).caption || '' : '');
    w.attr(ui.windowCard, 'data-algorithm', a);
    w.attr(app, 'data-algorithm', a);
    w.attr(ui.timeline, 'aria-label', inflight ? 'Each live lease as a bar from its start to its expiry; the line is now'
      : entries(a) ? 'Entries of the sorted set placed by score; the cutoff line is at now minus the window'
        : 'The ' + a + ' state of each rule, moving with the limiter clock');
    w.text(ui.countLabel, inflight ? 'In flight / limit' : entries(a) ? 'In window / limit' : 'Used / limit');
    if (inflight) w.text(ui.algoCaption, LEASES_CAPTION);
    showKeys();
  }

  // showKeys names the watched window's Redis key: the log's sorted set or,
  // for the other algorithms, their hash beside it.
  function showKeys() {
    const leased = state.algorithm === INFLIGHT; // leases live in a sorted set, scored by expiry
    const k = redisKey(facts, state.key, state.policy, algorithm(state.algorithm) || { name: state.algorithm, entries: leased });
    for (const el of ui.zsetKeys) el.textContent = k;
    w.text(ui.redisKeyLabel, entries(state.algorithm) || leased ? 'Redis sorted set' : 'Redis hash, a field per rule');
  }

  function applyPolicy() {
    const pol = policyByName(state.policies, state.policy);
    const rules = pol && Array.isArray(pol.rules) ? pol.rules : [];
    setAlgorithm(pol && pol.algorithm ? pol.algorithm : DEFAULT, !!(pol && pol.shadow));
    state.timezone = (pol && pol.timezone) || 'UTC';
    state.policyLabel = rules.map((r) => r.label || ruleLabel(r)).join(', ');
    setRules(rules);
  }

  function streamURL() {
    return wsURL('/ws', { key: state.key, policy: state.policy });
  }

  function showKeyError(msg) {
    ui.keyError.textContent = msg;
    ui.keyError.hidden = msg === '';
    if (msg) ui.key.setAttribute('aria-invalid', 'true');
    else ui.key.removeAttribute('aria-invalid');
  }

  function switchWindow() {
    const key = ui.key.value.trim();
    const policy = ui.policy.value;
    if (!KEY_RE.test(key)) {
      showKeyError(key === '' ? 'Enter a key.' : 'A key is ' + facts.keyHint.replace(' of ', ' characters of '));
      return;
    }
    showKeyError('');
    ui.key.value = key;
    if (key === state.key && policy === state.policy) return;
    state.key = key;
    state.policy = policy;
    history.replaceState(null, '', location.pathname + '?key=' + encodeURIComponent(key) + '&policy=' + encodeURIComponent(policy));
    state.reported = { count: null, limit: null };
    blocked.clear();
    state.viewers = 0;
    state.listedEarlier = false;
    model.clear();
    algo.clear();
    algoView.clear();
    timeline.clear();
    leases.clear();
    log.clear();
    rate.clear();
    race.clear();
    quotas.clear();
    override.show(null); // until hello names the new key's
    clearActions(actions);
    applyPolicy();
    race.availability();
    stream.open(streamURL());
  }

  ui.picker.addEventListener('submit', (ev) => {
    ev.preventDefault();
    switchWindow();
  });
  ui.key.addEventListener('change', switchWindow); // fires on Enter and on blur
  ui.key.addEventListener('input', () => {
    if (KEY_RE.test(ui.key.value.trim())) showKeyError('');
  });
  ui.policy.addEventListener('change', switchWindow);

  // ---------- drawing ----------

  function render() {
    renderStatus(ui.status, w, statusOf(stream.connected, state.redis, clock.behindMs()));
    if (state.viewers !== null) {
      w.text(ui.viewers, String(state.viewers));
      w.text(ui.viewersLabel, state.viewers === 1 ? 'tab watching' : 'tabs watching');
    }
    w.text(ui.rulesLabel, state.policyLabel);
    override.render();
    if (state.instance) {
      w.text(ui.streamInstance, state.instance);
      ui.streamInstanceWrap.hidden = false;
    }
    race.render();
    const t = clock.now();
    if (t === null) return;
    w.text(ui.clock, String(Math.floor(t)));
    w.text(ui.clockUTC, fmtUTC(Math.floor(t)));
    model.expire(t);
    const verdict = blocked.verdict(t);
    blocked.render(t);
    if (state.algorithm === INFLIGHT) {
      leases.expire(t);
      leases.render(t);
      leases.readouts(t, counter, ring);
    } else if (entries(state.algorithm)) {
      timeline.render(model, t);
      counter.render(t, model, state.rules, state.reported, verdict);
      ring.render(t, model.oldestMs, model.windowMs, blocked.ring(t));
    } else {
      algoView.render(algo, t);
      counter.render(t, algo.known ? algo : model, state.rules, state.reported, verdict);
      renderAlgoRing(ring, algo, bindingRule(state.rules), algorithm(state.algorithm), t, blocked.ring(t));
    }
    log.render(Math.max(state.reported.limit || 0, ...state.rules.map((r) => r.limit)));
    rate.render(t);
    quotas.render(t);
  }

  applyPolicy();
  race.availability();
  window.addEventListener('online', () => stream.retry());
  stream.open(streamURL());
  drawEveryFrame(render);
}

function num(v) {
  return typeof v === 'number' ? v : null;
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
else init();
