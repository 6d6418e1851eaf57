// The lab's traffic: real POST /api/v1/lab/check calls from the
// browser, shaped as steady, burst, boundary or random.

import { api, problemText } from './api.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

let answered = () => {};
let auth; // headers for a lab that needs the API token

// useToken sends token as the bearer of every lab request from now on; an
// empty token sends none.
export function useToken(token) {
  auth = token ? { Authorization: 'Bearer ' + token } : undefined;
}

// onAnswer has f called with every answer: the page draws a request from its
// own answer as well as from the stream, so no mark is lost while the stream
// (re)connects; the model keeps each request once, by id.
export function onAnswer(f) {
  answered = f;
}

// check sends one lab request and returns its answer; it throws on failure.
export async function check(lab, limit, windowMs) {
  const { res, data } = await api('POST', '/api/v1/lab/check', { lab: lab, limit: limit, windowMs: windowMs, cost: 1 }, auth);
  if (!res.ok) throw new Error(problemText(res, data));
  answered(data);
  return data;
}

export async function reset(lab) {
  const { res, data } = await api('DELETE', '/api/v1/lab?lab=' + encodeURIComponent(lab), undefined, auth);
  if (!res.ok) throw new Error(problemText(res, data));
}

// schedule sends a request at each offset (ms from now) and waits for all.
async function schedule(offsets, send) {
  const t0 = performance.now();
  const pending = [];
  for (const at of offsets) {
    await sleep(at - (performance.now() - t0));
    pending.push(send());
  }
  return Promise.all(pending);
}

const EDGE_MARGIN_MS = 5;

// Rate shapes run for two windows at 1.5 × the allowed rate.
const OVERLOAD = 1.5;
const WINDOWS = 2;

// boundary waits for a fixed-window edge on the limiter's clock (the next
// multiple of windowMs after now), sends limit requests just before it and
// limit just after it. clock() estimates the limiter's clock now; the first
// burst starts early enough to land before the edge, which the answers
// confirm (their nowMs): when a busy machine makes a burst miss its side of
// the edge, the caller resets and tries the next edge.
async function boundary(lab, limit, windowMs, clock, progress) {
  const lead = Math.min(windowMs / 3, 250 + 25 * limit);
  let now = clock();
  let edge = Math.floor(now / windowMs) * windowMs + windowMs;
  if (edge - now < lead + 100) edge += windowMs;
  progress('waiting for the fixed-window edge at …' + String(edge).slice(-6) + ' on the limiter’s clock');
  await sleep(edge - lead - clock());
  const burst = () => Promise.all(Array.from({ length: limit }, () => check(lab, limit, windowMs)));
  const before = await burst();
  while (clock() < edge + 30) await sleep(edge + 30 - clock());
  const after = await burst();
  // nowMs is the log's reading; the other four read the clock a moment
  // later in the same transaction, so the first burst keeps a margin.
  return before.every((a) => a.nowMs < edge - EDGE_MARGIN_MS) && after.every((a) => a.nowMs >= edge);
}

// SHAPES send one traffic shape each; a boundary run resolves to false when
// it missed its edge.
const SHAPES = {
  boundary: (lab, limit, windowMs, clock, progress) => boundary(lab, limit, windowMs, clock, progress),
  burst: async (lab, limit, windowMs, clock, progress) => {
    progress('sending ' + 2 * limit + ' requests at once');
    await Promise.all(Array.from({ length: 2 * limit }, () => check(lab, limit, windowMs)));
    return true;
  },
  steady: async (lab, limit, windowMs, clock, progress) => {
    const gap = windowMs / (limit * OVERLOAD);
    const n = Math.round(limit * OVERLOAD * WINDOWS);
    progress('sending ' + n + ' requests, one every ' + Math.round(gap) + ' ms');
    await schedule(Array.from({ length: n }, (_, i) => i * gap), () => check(lab, limit, windowMs));
    return true;
  },
  random: async (lab, limit, windowMs, clock, progress) => {
    const gap = windowMs / (limit * OVERLOAD);
    const offsets = [];
    for (let t = 0; ; ) {
      t += -Math.log(1 - Math.random()) * gap; // exponential gaps: Poisson arrivals
      if (t > windowMs * WINDOWS) break;
      offsets.push(t);
    }
    progress('sending ' + offsets.length + ' requests at random (Poisson) times');
    await schedule(offsets, () => check(lab, limit, windowMs));
    return true;
  },
};

// run sends the traffic shape named traffic.
export function run(traffic, lab, limit, windowMs, clock, progress) {
  const shape = SHAPES[traffic];
  if (!shape) return Promise.reject(new Error('unknown traffic ' + traffic));
  return shape(lab, limit, windowMs, clock, progress);
}
