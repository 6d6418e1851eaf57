// ratescope visualizer: animates the server-rendered page from the WebSocket
// stream of one window. Everything shown comes from the server (stream messages
// and HTTP answers); the script only interpolates Redis's clock between ticks
// and moves the entries it was told about. No modules, no build step.
'use strict';

(function () {
  const KEY_RE = /^[A-Za-z0-9._:@/+=-]{1,128}$/;
  const SPAN = 1.2; // the timeline shows 1.2 windows: the window plus what just left it
  const LANES = 7; // dots spread over lanes so same-millisecond entries stay visible
  const LOG_MAX = 50;
  const GHOST_MS = 650; // how long a slid-out entry fades (a copy without the testid)
  const BACKOFF_MIN_MS = 250;
  const BACKOFF_MAX_MS = 5000;
  const WATCHDOG_MIN_MS = 5000; // a socket silent this long (no tick) is treated as dead
  const HIDDEN_UPDATE_MS = 500; // state upkeep while the tab is hidden and nothing is drawn
  const TOAST_MS = 6000;
  const RING_R = 52;
  const RING_C = 2 * Math.PI * RING_R;
  const CLOCK_SLACK_MS = 1000; // clock corrections smaller than this never run backwards

  const byTestId = (id) => document.querySelector('[data-testid="' + id + '"]');
  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  const ui = {};
  const state = {
    key: '',
    policy: '',
    policies: [],
    rules: [], // [{limit, windowMs}] of the watched policy
    tickMs: 100,

    socket: null,
    connected: false,
    redis: 'unknown',
    attempt: 0,
    reconnectTimer: 0,
    watchdogTimer: 0,

    clockBase: null, // Redis nowMs of the last tick
    clockAt: 0, // performance.now() when it arrived
    lastNow: 0,

    windowMs: 0, // the longest rule's window: what the timeline spans
    entries: new Map(), // id -> {ms, el}; only in-window entries, each with the testid
    laneLast: new Array(LANES).fill(-Infinity), // newest score placed in each lane
    ghosts: [], // {el, ms, until}: entries fading out, no testid
    haveSnapshot: false,
    truncated: false,
    serverCount: null, // count/limit as last reported by a snapshot or decision
    serverLimit: null,
    serverRules: null,
    denial: null, // {retryAt, total} from the last decision when it was a 429

    trackW: 0,
    raf: 0,
    hiddenTimer: 0,
    drawn: {}, // last values written to the DOM, to skip needless writes
    boundaryBusy: false,
    raceBusy: false,
  };

  // ---------- start-up ----------

  function init() {
    const app = $('app');
    if (!app) return;
    state.key = app.dataset.key || 'demo';
    state.policy = app.dataset.policy || 'demo';
    state.tickMs = Number(app.dataset.tickMs) || 100;
    try {
      state.policies = JSON.parse(app.dataset.policies || '[]') || [];
    } catch (e) {
      state.policies = [];
    }
    findElements();
    bindControls();
    observeTrack();
    applyPolicyRules();
    renderRaceAvailability();
    renderStatus();
    document.addEventListener('visibilitychange', schedule);
    window.addEventListener('online', () => {
      if (!state.socket) connect();
    });
    connect();
    schedule();
  }

  function findElements() {
    for (const id of ['clock', 'ring', 'timeline', 'count', 'send', 'boundary-test', 'boundary-result',
      'reset', 'log', 'race-naive', 'race-atomic', 'race-result', 'key', 'policy', 'viewers', 'status']) {
      ui[id] = byTestId(id);
    }
    ui.cutoff = byTestId('cutoff');
    ui.entries = $('tl-entries');
    ui.ringWrap = $('ring-wrap');
    ui.ringBar = $('ring-bar');
    ui.ringValue = $('ring-value');
    ui.ringLabel = $('ring-label');
    ui.verdict = $('verdict');
    ui.ruleCounts = $('rule-counts');
    ui.rulesLabel = $('rules-label');
    ui.axisStart = $('axis-start');
    ui.truncated = $('truncated');
    ui.sendResult = $('send-result');
    ui.keyError = $('key-error');
    ui.picker = $('picker');
    ui.raceHint = $('race-hint');
    ui.viewersLabel = $('viewers-label');
    ui.toasts = $('toasts');
    ui.streamInstance = $('stream-instance');
    ui.streamInstanceWrap = $('stream-instance-wrap');
    ui.zsetKeys = document.querySelectorAll('#zset-key, #zset-key-2, #zset-key-3');
    ui.ringBar.style.strokeDasharray = RING_C.toFixed(2);
    ui.ringBar.style.strokeDashoffset = RING_C.toFixed(2);
  }

  function bindControls() {
    ui.send.addEventListener('click', onSend);
    ui['boundary-test'].addEventListener('click', onBoundaryTest);
    ui.reset.addEventListener('click', onReset);
    ui['race-naive'].addEventListener('click', () => onRace('naive'));
    ui['race-atomic'].addEventListener('click', () => onRace('atomic'));
    ui.picker.addEventListener('submit', (ev) => {
      ev.preventDefault();
      switchWindow();
    });
    ui.key.addEventListener('change', switchWindow); // fires on Enter and on blur
    ui.key.addEventListener('input', () => {
      if (KEY_RE.test(ui.key.value.trim())) showKeyError('');
    });
    ui.policy.addEventListener('change', switchWindow);
  }

  // The track width is measured only when it changes, never inside a frame.
  function observeTrack() {
    const measure = () => {
      state.trackW = ui.entries.clientWidth;
    };
    measure();
    if ('ResizeObserver' in window) {
      new ResizeObserver(measure).observe(ui.entries);
    } else {
      window.addEventListener('resize', measure);
    }
  }

  // ---------- which window ----------

  function policyByName(name) {
    return state.policies.find((p) => p.name === name) || null;
  }

  function applyPolicyRules() {
    const pol = policyByName(state.policy);
    setRules(pol && Array.isArray(pol.rules) ? pol.rules : []);
    for (const el of ui.zsetKeys) el.textContent = 'rate_limit:{' + state.key + '}:' + state.policy;
  }

  function setRules(rules) {
    state.rules = rules
      .filter((r) => r && r.limit > 0 && r.windowMs > 0)
      .map((r) => ({ limit: r.limit, windowMs: r.windowMs, label: r.label || ruleLabel(r) }));
    const longest = state.rules.reduce((m, r) => Math.max(m, r.windowMs), 0);
    if (longest > 0) setWindowMs(longest);
    ui.rulesLabel.textContent = state.rules.map((r) => r.label).join(', ');
  }

  function setWindowMs(ms) {
    if (!(ms > 0) || ms === state.windowMs) return;
    state.windowMs = ms;
    ui.axisStart.textContent = '−' + fmtDuration(SPAN * ms);
  }

  // bindingRule is the rule whose count the page shows: the smallest limit
  // (it fills first), the shorter window on a tie.
  function bindingRule() {
    let best = null;
    for (const r of state.rules) {
      if (!best || r.limit < best.limit || (r.limit === best.limit && r.windowMs < best.windowMs)) best = r;
    }
    return best;
  }

  function smallestLimit() {
    const r = bindingRule();
    return r ? r.limit : state.serverLimit || 0;
  }

  function switchWindow() {
    const key = ui.key.value.trim();
    const policy = ui.policy.value;
    if (!KEY_RE.test(key)) {
      showKeyError(key === ''
        ? 'Enter a key.'
        : 'A key is 1–128 characters of A–Z a–z 0–9 . _ : @ / + = -');
      return;
    }
    showKeyError('');
    ui.key.value = key;
    if (key === state.key && policy === state.policy) return;
    state.key = key;
    state.policy = policy;
    const url = location.pathname + '?key=' + enc(key) + '&policy=' + enc(policy);
    history.replaceState(null, '', url);
    clearWindowState();
    applyPolicyRules();
    renderRaceAvailability();
    disconnect();
    state.attempt = 0;
    connect();
  }

  function showKeyError(msg) {
    ui.keyError.textContent = msg;
    ui.keyError.hidden = msg === '';
    if (msg) ui.key.setAttribute('aria-invalid', 'true');
    else ui.key.removeAttribute('aria-invalid');
  }

  function clearWindowState() {
    for (const e of state.entries.values()) e.el.remove();
    state.entries.clear();
    for (const g of state.ghosts) g.el.remove();
    state.ghosts = [];
    state.laneLast.fill(-Infinity);
    state.haveSnapshot = false;
    state.truncated = false;
    state.serverCount = null;
    state.serverLimit = null;
    state.serverRules = null;
    state.denial = null;
    state.windowMs = 0;
    ui.log.replaceChildren();
    ui['boundary-result'].textContent = '';
    ui.sendResult.textContent = '';
    ui.sendResult.className = '';
    for (const line of ui['race-result'].querySelectorAll('.race-line')) clearRaceLine(line);
    ui.viewers.textContent = '0';
    ui.truncated.hidden = true;
  }

  // ---------- the WebSocket ----------

  function connect() {
    clearTimeout(state.reconnectTimer);
    state.reconnectTimer = 0;
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const url = proto + '//' + location.host + '/ws?key=' + enc(state.key) + '&policy=' + enc(state.policy);
    let ws;
    try {
      ws = new WebSocket(url);
    } catch (e) {
      scheduleReconnect();
      return;
    }
    state.socket = ws;
    ws.addEventListener('open', () => {
      if (state.socket !== ws) return;
      state.connected = true;
      state.redis = 'unknown';
      renderStatus();
      armWatchdog();
    });
    ws.addEventListener('message', (ev) => {
      if (state.socket !== ws) return;
      armWatchdog();
      let msg;
      try {
        msg = JSON.parse(ev.data);
      } catch (e) {
        return;
      }
      if (msg && typeof msg === 'object') handleMessage(msg);
    });
    ws.addEventListener('close', () => {
      if (state.socket !== ws) return;
      dropSocket();
      scheduleReconnect();
    });
  }

  function dropSocket() {
    const ws = state.socket;
    state.socket = null;
    state.connected = false;
    clearTimeout(state.watchdogTimer);
    if (ws) {
      try {
        ws.close(1000);
      } catch (e) { /* already closed */ }
    }
    renderStatus();
  }

  function disconnect() {
    clearTimeout(state.reconnectTimer);
    state.reconnectTimer = 0;
    dropSocket();
  }

  // Exponential backoff with jitter: 250 ms doubling up to 5 s, each delay
  // drawn from its upper half so many tabs don't reconnect in lockstep.
  function scheduleReconnect() {
    if (state.reconnectTimer) return;
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * Math.pow(2, state.attempt));
    state.attempt++;
    const delay = base / 2 + Math.random() * base / 2;
    state.reconnectTimer = setTimeout(() => {
      state.reconnectTimer = 0;
      connect();
    }, delay);
  }

  // A socket that stops delivering ticks (a dead peer or network) is replaced.
  function armWatchdog() {
    clearTimeout(state.watchdogTimer);
    const ms = Math.max(WATCHDOG_MIN_MS, state.tickMs * 20);
    state.watchdogTimer = setTimeout(() => {
      if (!state.socket) return;
      dropSocket();
      scheduleReconnect();
    }, ms);
  }

  function forThisWindow(m) {
    return m.key === state.key && m.policy === state.policy;
  }

  function handleMessage(m) {
    if (state.clockBase === null && typeof m.nowMs === 'number') syncClock(m.nowMs);
    switch (m.type) {
      case 'hello': return onHello(m);
      case 'status': return onStatus(m);
      case 'tick': return syncClock(m.nowMs);
      case 'snapshot': return onSnapshot(m);
      case 'decision': return onDecision(m);
      case 'reset': return onResetMsg(m);
      case 'race': return onRaceMsg(m);
      case 'viewers': return onViewers(m);
      default: return undefined;
    }
  }

  function onHello(m) {
    state.attempt = 0;
    if (m.tickMs > 0) state.tickMs = m.tickMs;
    if (Array.isArray(m.rules) && m.rules.length) {
      const known = policyByName(state.policy);
      const labels = known && Array.isArray(known.rules) ? known.rules : [];
      setRules(m.rules.map((r) => {
        const same = labels.find((l) => l.limit === r.limit && l.windowMs === r.windowMs);
        return { limit: r.limit, windowMs: r.windowMs, label: same ? same.label : '' };
      }));
    }
    if (m.instance) {
      ui.streamInstance.textContent = String(m.instance);
      ui.streamInstanceWrap.hidden = false;
    }
  }

  function onStatus(m) {
    state.redis = m.redis === 'down' ? 'down' : 'up';
    renderStatus();
  }

  function onViewers(m) {
    const n = Number(m.count) || 0;
    ui.viewers.textContent = String(n);
    ui.viewersLabel.textContent = n === 1 ? 'tab watching' : 'tabs watching';
  }

  // ---------- the limiter's clock ----------

  function syncClock(nowMs) {
    if (typeof nowMs !== 'number' || !isFinite(nowMs)) return;
    state.clockBase = nowMs;
    state.clockAt = performance.now();
  }

  // now is Redis's clock: the last tick plus the time since it arrived. Small
  // corrections never make it run backwards; large ones (a new server) jump.
  function now() {
    if (state.clockBase === null) return null;
    let t = state.clockBase + (performance.now() - state.clockAt);
    if (t < state.lastNow && state.lastNow - t < CLOCK_SLACK_MS) t = state.lastNow;
    state.lastNow = t;
    return t;
  }

  // ---------- window state from messages ----------

  function onSnapshot(m) {
    if (!forThisWindow(m)) return;
    setWindowMs(m.windowMs);
    state.haveSnapshot = true;
    state.truncated = !!m.truncated;
    state.serverCount = typeof m.count === 'number' ? m.count : null;
    state.serverLimit = typeof m.limit === 'number' ? m.limit : null;
    state.serverRules = Array.isArray(m.rules) ? m.rules : null;
    const t = now();
    const cutoff = t === null ? -Infinity : t - state.windowMs;
    const list = Array.isArray(m.entries) ? m.entries : [];
    const seen = new Set();
    for (const e of list) {
      if (!e || typeof e.id !== 'string') continue;
      seen.add(e.id);
      if (!(e.ms > cutoff)) continue;
      const have = state.entries.get(e.id);
      if (!have) addEntry(e.id, e.ms, t);
      else if (have.ms !== e.ms) {
        have.ms = e.ms;
        have.el.dataset.ms = String(e.ms);
      }
    }
    // Entries newer than the snapshot (added by a decision that raced it) stay;
    // older ones it does not list are gone from Redis.
    const horizon = state.truncated && list.length ? list[list.length - 1].ms : m.nowMs;
    for (const [id, e] of state.entries) {
      if (!seen.has(id) && e.ms <= horizon) retireEntry(id, 'is-leaving');
    }
    if (state.truncated) {
      ui.truncated.textContent = 'Showing the oldest ' + list.length.toLocaleString('en-US') +
        ' of ' + (m.count || 0).toLocaleString('en-US') + ' entries.';
      ui.truncated.hidden = false;
    } else {
      ui.truncated.hidden = true;
    }
  }

  function onDecision(m) {
    if (!forThisWindow(m)) return;
    prependLog(decisionLogItem(m));
    if (typeof m.count === 'number') state.serverCount = m.count;
    if (typeof m.limit === 'number') state.serverLimit = m.limit;
    if (m.allowed) {
      state.denial = null;
      const t = now();
      const fresh = t === null || m.nowMs > t - state.windowMs;
      if (m.id && fresh && !state.entries.has(m.id)) addEntry(String(m.id), m.nowMs, t);
    } else {
      const retry = Math.max(0, Number(m.retryAfterMs) || 0);
      state.denial = { retryAt: m.nowMs + retry, total: retry };
    }
  }

  function onResetMsg(m) {
    if (!forThisWindow(m)) return;
    for (const id of Array.from(state.entries.keys())) retireEntry(id, 'is-dropped');
    state.laneLast.fill(-Infinity);
    state.denial = null;
    state.serverCount = 0;
    prependLog(noteItem(m.nowMs, 'window reset'));
  }

  function onRaceMsg(m) {
    if (!forThisWindow(m)) return;
    state.denial = null;
    renderRace(m);
    prependLog(noteItem(null, 'race ' + raceText(m)));
  }

  // ---------- timeline entries ----------

  function addEntry(id, ms, t) {
    const el = document.createElement('span');
    el.className = 'tl-entry lane-' + pickLane(ms);
    el.dataset.testid = 'timeline-entry';
    el.dataset.id = id;
    el.dataset.ms = String(ms);
    el.title = 'member ' + id + '\nscore ' + ms;
    if (t !== null && t !== undefined) placeEntry(el, ms, t);
    ui.entries.appendChild(el);
    state.entries.set(id, { ms: ms, el: el });
  }

  // retireEntry takes an entry out of the set at once; what stays on screen
  // for a moment is a fading copy without the testid.
  function retireEntry(id, cls) {
    const e = state.entries.get(id);
    if (!e) return;
    state.entries.delete(id);
    e.el.removeAttribute('data-testid');
    e.el.removeAttribute('data-id');
    e.el.classList.add(cls);
    state.ghosts.push({ el: e.el, ms: e.ms, until: performance.now() + GHOST_MS });
  }

  // pickLane puts a new dot in the lane whose newest dot is oldest, so a burst
  // of same-millisecond entries fans out instead of stacking on one spot.
  function pickLane(ms) {
    let best = 0;
    for (let i = 1; i < LANES; i++) if (state.laneLast[i] < state.laneLast[best]) best = i;
    state.laneLast[best] = ms;
    return best;
  }

  function placeEntry(el, ms, t) {
    const span = SPAN * state.windowMs;
    if (!(span > 0)) return;
    const x = ((ms - (t - span)) / span) * state.trackW;
    el.style.transform = 'translate3d(' + x.toFixed(1) + 'px,0,0)';
  }

  // ---------- drawing ----------

  // schedule runs frames while visible; while hidden it only keeps the state
  // (slide-outs, count, ring value) current at a slow pace, drawing nothing.
  function schedule() {
    if (document.hidden) {
      if (state.raf) cancelAnimationFrame(state.raf);
      state.raf = 0;
      if (!state.hiddenTimer) state.hiddenTimer = setInterval(() => update(false), HIDDEN_UPDATE_MS);
      return;
    }
    if (state.hiddenTimer) {
      clearInterval(state.hiddenTimer);
      state.hiddenTimer = 0;
    }
    if (!state.raf) state.raf = requestAnimationFrame(frame);
  }

  function frame() {
    state.raf = 0;
    update(true);
    if (!document.hidden) state.raf = requestAnimationFrame(frame);
  }

  function update(draw) {
    const t = now();
    if (t === null) return;
    setText('clock', ui.clock, String(Math.floor(t)));
    if (state.windowMs > 0) ui.cutoff.dataset.ms = String(Math.floor(t - state.windowMs));
    const oldest = expireEntries(t);
    renderCount(t);
    renderRing(t, oldest);
    if (draw) {
      for (const e of state.entries.values()) placeEntry(e.el, e.ms, t);
      drawGhosts(t);
    }
  }

  // expireEntries retires entries that slid out (score ≤ now − window) and
  // returns the oldest score still inside.
  function expireEntries(t) {
    const cutoff = t - state.windowMs;
    let oldest = Infinity;
    for (const [id, e] of state.entries) {
      if (e.ms <= cutoff) retireEntry(id, 'is-leaving');
      else if (e.ms < oldest) oldest = e.ms;
    }
    return oldest === Infinity ? null : oldest;
  }

  function drawGhosts(t) {
    const p = performance.now();
    let keep = 0;
    for (const g of state.ghosts) {
      if (p >= g.until) {
        g.el.remove();
        continue;
      }
      placeEntry(g.el, g.ms, t);
      state.ghosts[keep++] = g;
    }
    state.ghosts.length = keep;
  }

  function countIn(windowMs, t) {
    const lo = t - windowMs;
    let n = 0;
    for (const e of state.entries.values()) if (e.ms > lo) n++;
    return n;
  }

  // renderCount shows N / L for the binding rule. While every entry is known
  // (the snapshot was not truncated) N is counted from them, so it drops the
  // instant a dot crosses the cutoff; otherwise the server's numbers stand.
  function renderCount(t) {
    const rule = bindingRule();
    let n = state.serverCount;
    let l = state.serverLimit;
    if (rule && state.haveSnapshot && !state.truncated) {
      n = countIn(rule.windowMs, t);
      l = rule.limit;
    } else if (rule && l === null) {
      l = rule.limit;
    }
    const text = (n === null ? '–' : n) + ' / ' + (l === null ? '–' : l);
    setText('count', ui.count, text);

    const blocked = isBlocked(t);
    let verdict = '';
    let cls = 'verdict';
    if (blocked) {
      verdict = 'blocked';
      cls += ' is-denied';
    } else if (n !== null && l !== null) {
      if (n >= l) {
        verdict = 'full: the next request gets 429';
        cls += ' is-full';
      } else {
        verdict = (l - n) + ' left';
        cls += ' is-allowed';
      }
    }
    setText('verdict', ui.verdict, verdict);
    setClass('verdict', ui.verdict, cls);
    renderRuleCounts(t);
  }

  function renderRuleCounts(t) {
    if (state.rules.length < 2) {
      setText('rules', ui.ruleCounts, '');
      return;
    }
    const parts = state.rules.map((r) => {
      let n = null;
      if (state.haveSnapshot && !state.truncated) n = countIn(r.windowMs, t);
      else if (state.serverRules) {
        const s = state.serverRules.find((x) => x.windowMs === r.windowMs);
        if (s && typeof s.count === 'number') n = s.count;
      }
      return r.label + ': ' + (n === null ? '–' : n) + ' / ' + r.limit;
    });
    setText('rules', ui.ruleCounts, parts.join(' · '));
  }

  function isBlocked(t) {
    return state.denial !== null && state.denial.retryAt > t;
  }

  function renderRing(t, oldest) {
    let remaining = 0;
    let total = state.windowMs || 1;
    let mode = 'is-idle';
    let label = 'window empty';
    if (isBlocked(t)) {
      remaining = state.denial.retryAt - t;
      total = Math.max(state.denial.total, 1);
      mode = 'is-blocked';
      label = 'Retry-After';
    } else if (oldest !== null) {
      remaining = Math.max(0, oldest + state.windowMs - t);
      mode = 'is-counting';
      label = 'until the oldest slides out';
    }
    const ms = Math.max(0, Math.round(remaining));
    if (state.drawn.ringMs !== ms) {
      state.drawn.ringMs = ms;
      ui.ring.setAttribute('data-remaining-ms', String(ms));
    }
    const secs = (Math.ceil(ms / 100) / 10).toFixed(1);
    setText('ringValue', ui.ringValue, secs + ' s');
    setClass('ringValueLen', ui.ringValue, 'ring-value' + (secs.length > 7 ? ' is-longer' : secs.length > 5 ? ' is-long' : ''));
    setText('ringLabel', ui.ringLabel, label);
    setClass('ringWrap', ui.ringWrap, 'ring-wrap ' + mode);
    const frac = Math.min(1, Math.max(0, remaining / total));
    const offset = (RING_C * (1 - frac)).toFixed(1);
    if (state.drawn.ringOffset !== offset) {
      state.drawn.ringOffset = offset;
      ui.ringBar.style.strokeDashoffset = offset;
    }
  }

  function setText(slot, el, text) {
    if (state.drawn['t:' + slot] === text) return;
    state.drawn['t:' + slot] = text;
    el.textContent = text;
  }

  function setClass(slot, el, cls) {
    if (state.drawn['c:' + slot] === cls) return;
    state.drawn['c:' + slot] = cls;
    el.className = cls;
  }

  function renderStatus() {
    let s = 'reconnecting';
    if (state.connected && state.redis !== 'unknown') s = state.redis === 'down' ? 'redis down' : 'live';
    ui.status.textContent = s;
    ui.status.className = 'status status-' + s.replace(' ', '-');
  }

  // ---------- the log ----------

  function decisionLogItem(m) {
    const li = document.createElement('li');
    li.className = 'log-entry ' + (m.allowed ? 'is-allowed' : 'is-denied');
    li.dataset.testid = 'log-entry';
    li.append(
      span('log-time', fmtTime(m.nowMs)),
      span('badge ' + (m.allowed ? 'badge-ok' : 'badge-bad'), m.allowed ? '200' : '429'),
      span('log-count', (m.count ?? '–') + ' / ' + (m.limit ?? '–')),
      span('log-what', m.allowed ? 'allowed' : 'Retry-After ' + fmtSeconds(m.retryAfterMs) + ' s'),
    );
    if (m.instance) {
      const inst = span('log-inst', shortId(String(m.instance)));
      inst.title = 'instance ' + m.instance;
      li.append(inst);
    }
    return li;
  }

  function noteItem(ms, text) {
    const li = document.createElement('li');
    li.className = 'log-note';
    li.append(span('log-time', ms ? fmtTime(ms) : fmtTime(now())), span('log-what', text));
    return li;
  }

  function prependLog(li) {
    ui.log.prepend(li);
    while (ui.log.children.length > LOG_MAX) ui.log.lastElementChild.remove();
  }

  function span(cls, text) {
    const s = document.createElement('span');
    s.className = cls;
    s.textContent = text;
    return s;
  }

  // ---------- HTTP actions ----------

  async function api(method, path, body) {
    const init = { method: method, headers: { Accept: 'application/json, application/problem+json' } };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await fetch(path, init);
    let data = null;
    const text = await res.text();
    if (text) {
      try {
        data = JSON.parse(text);
      } catch (e) {
        data = null;
      }
    }
    return { res: res, data: data };
  }

  function problemText(res, data) {
    let msg = '';
    if (data && Array.isArray(data.errors) && data.errors.length) {
      msg = data.errors.map((e) => (e.field ? e.field + ': ' : '') + (e.detail || '')).join('; ');
    } else if (data && (data.detail || data.title)) {
      msg = data.detail || data.title;
    }
    return res.status + (msg ? ' ' + msg : ' ' + (res.statusText || 'error'));
  }

  function windowQuery(key, policy) {
    return 'key=' + enc(key) + '&policy=' + enc(policy);
  }

  async function onSend() {
    const key = state.key;
    const policy = state.policy;
    try {
      const { res, data } = await api('POST', '/api/v1/check', { key: key, policy: policy });
      if (res.status === 200 && data) {
        const what = data.failOpen
          ? '200 allowed (fail-open: Redis unreachable)'
          : '200 allowed · ' + data.count + ' / ' + data.limit;
        showSendResult(what, 'is-allowed');
      } else if (res.status === 429) {
        const ra = res.headers.get('Retry-After');
        const exact = data && typeof data.retryAfterMs === 'number' ? ' (exactly ' + fmtSeconds(data.retryAfterMs) + ' s)' : '';
        showSendResult('429 denied · Retry-After ' + ra + ' s' + exact, 'is-denied');
      } else {
        showSendResult(problemText(res, data), 'is-error');
        toast('Request failed: ' + problemText(res, data));
      }
    } catch (e) {
      showSendResult('network error', 'is-error');
      toast('Request failed: ' + e.message);
    }
  }

  function showSendResult(text, cls) {
    ui.sendResult.textContent = text;
    ui.sendResult.className = cls;
  }

  // onBoundaryTest resets the window, then sends limit checks one after
  // another and one more, each a real call, and reports what came back.
  async function onBoundaryTest() {
    if (state.boundaryBusy) return;
    const btn = ui['boundary-test'];
    const out = ui['boundary-result'];
    const key = state.key;
    const policy = state.policy;
    const limit = smallestLimit();
    state.boundaryBusy = true;
    btn.disabled = true;
    out.className = '';
    out.textContent = 'resetting…';
    try {
      const r = await api('DELETE', '/api/v1/window?' + windowQuery(key, policy));
      if (!r.res.ok) {
        out.textContent = 'reset failed: ' + problemText(r.res, r.data);
        out.className = 'is-error';
        toast('Reset failed: ' + problemText(r.res, r.data));
        return;
      }
      let ok = 0;
      let text = '';
      for (let i = 1; i <= limit + 1; i++) {
        const { res, data } = await api('POST', '/api/v1/check', { key: key, policy: policy });
        if (res.status === 200) {
          ok++;
          out.textContent = ok + ' × 200…';
          if (i === limit + 1) text = ok + ' × 200, no 429 (expected 429 at request ' + (limit + 1) + ')';
          continue;
        }
        if (res.status === 429) {
          const ra = res.headers.get('Retry-After');
          text = i === limit + 1
            ? limit + ' × 200, then 429 (Retry-After ' + ra + ' s)'
            : ok + ' × 200, then 429 at request ' + i + ' (expected ' + limit + ' × 200)';
        } else {
          text = ok + ' × 200, then ' + problemText(res, data) + ' at request ' + i;
        }
        break;
      }
      out.textContent = text;
      out.className = text.indexOf(limit + ' × 200, then 429 (') === 0 ? 'is-allowed' : 'is-error';
    } catch (e) {
      out.textContent = 'network error: ' + e.message;
      out.className = 'is-error';
    } finally {
      state.boundaryBusy = false;
      btn.disabled = false;
    }
  }

  async function onReset() {
    const btn = ui.reset;
    btn.disabled = true;
    try {
      const { res, data } = await api('DELETE', '/api/v1/window?' + windowQuery(state.key, state.policy));
      if (res.ok) toast('Window reset.', 'info');
      else toast('Reset failed: ' + problemText(res, data));
    } catch (e) {
      toast('Reset failed: ' + e.message);
    } finally {
      btn.disabled = false;
    }
  }

  // ---------- the race ----------

  function renderRaceAvailability() {
    const onDemo = state.policy === 'demo';
    ui['race-naive'].disabled = !onDemo || state.raceBusy;
    ui['race-atomic'].disabled = !onDemo || state.raceBusy;
    ui.raceHint.hidden = onDemo;
  }

  async function onRace(mode) {
    if (state.policy !== 'demo' || state.raceBusy) return;
    state.raceBusy = true;
    renderRaceAvailability();
    const line = raceLine(mode);
    const key = state.key;
    line.classList.add('is-running');
    try {
      const { res, data } = await api('POST', '/api/v1/race', { key: key, mode: mode });
      if (res.ok && data) {
        renderRace(data);
      } else {
        const why = res.status === 409 ? 'a race is already running on this window' : problemText(res, data);
        toast('Race failed: ' + why);
      }
    } catch (e) {
      toast('Race failed: ' + e.message);
    } finally {
      line.classList.remove('is-running');
      state.raceBusy = false;
      renderRaceAvailability();
    }
  }

  function raceLine(mode) {
    return ui['race-result'].querySelector('.race-line[data-mode="' + (mode === 'naive' ? 'naive' : 'atomic') + '"]');
  }

  function raceText(r) {
    let verdict = 'within the limit';
    if (r.overshoot > 0) verdict = 'overshoot ' + r.overshoot;
    else if (r.allowed === r.limit) verdict = 'exact';
    return r.mode + ': ' + r.allowed + ' of ' + r.requests + ' allowed, limit ' + r.limit +
      ' — ' + verdict + ' (' + r.durationMs + ' ms)';
  }

  // renderRace writes the outcome and draws it as a bar: allowed within the
  // limit, then the overshoot past the limit marker.
  function renderRace(r) {
    if (r.mode !== 'naive' && r.mode !== 'atomic') return;
    const line = raceLine(r.mode);
    line.querySelector('.race-text').textContent = raceText(r);
    line.classList.toggle('has-overshoot', r.overshoot > 0);
    line.classList.add('has-result');
    const scale = Math.max(r.allowed, r.limit * 2, 1);
    const pct = (n) => (100 * n / scale).toFixed(2) + '%';
    line.querySelector('.race-fill').style.width = pct(Math.min(r.allowed, r.limit));
    line.querySelector('.race-over').style.width = pct(Math.max(0, r.allowed - r.limit));
    line.querySelector('.race-limit').style.left = pct(r.limit);
  }

  function clearRaceLine(line) {
    line.querySelector('.race-text').textContent = '';
    line.classList.remove('has-result', 'has-overshoot', 'is-running');
  }

  // ---------- small helpers ----------

  function toast(text, kind) {
    const t = document.createElement('div');
    t.className = 'toast ' + (kind === 'info' ? 'toast-info' : 'toast-error');
    t.textContent = text;
    ui.toasts.append(t);
    while (ui.toasts.children.length > 3) ui.toasts.firstElementChild.remove();
    setTimeout(() => t.remove(), TOAST_MS);
  }

  function fmtTime(ms) {
    if (typeof ms !== 'number' || !isFinite(ms)) return '';
    const d = new Date(ms);
    const p = (n, w) => String(n).padStart(w, '0');
    return p(d.getHours(), 2) + ':' + p(d.getMinutes(), 2) + ':' + p(d.getSeconds(), 2) + '.' + p(d.getMilliseconds(), 3);
  }

  function fmtSeconds(ms) {
    return ((Number(ms) || 0) / 1000).toFixed(3);
  }

  // fmtDuration renders a span compactly: 12 s, 1.5 min, 2 h, 7 d.
  function fmtDuration(ms) {
    const trim = (v) => String(Math.round(v * 10) / 10);
    if (ms < 120000) return trim(ms / 1000) + ' s';
    if (ms < 120 * 60000) return trim(ms / 60000) + ' min';
    if (ms < 48 * 3600000) return trim(ms / 3600000) + ' h';
    return trim(ms / 86400000) + ' d';
  }

  function ruleLabel(r) {
    const w = r.windowMs;
    const unit = w % 86400000 === 0 ? (w / 86400000) + 'd'
      : w % 3600000 === 0 ? (w / 3600000) + 'h'
        : w % 60000 === 0 ? (w / 60000) + 'm'
          : (w / 1000) + 's';
    return r.limit + ' per ' + unit;
  }

  function shortId(s) {
    return s.length > 8 ? s.slice(0, 8) : s;
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
