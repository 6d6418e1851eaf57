// The lab's boundary run explained in one sentence per algorithm, with the
// run's own numbers (testid 'lab-explain'): how many each allowed just
// before the fixed-window edge and just after it, and what that adds up to
// in the shortest span — "fixed window: 10 allowed — 5 just before the edge
// at 12:00:20.000 UTC, 5 just after: twice the limit in 0.212 s". Only a
// boundary run has an edge to speak of; other runs leave it empty.

import { algorithm } from './algorithms.js';
import { fmtUTC } from './format.js';

// edgeOf is the fixed-window edge the run straddles: the multiple of the
// window at or before its last request.
function edgeOf(model) {
  const w = model.windowMs;
  const last = model.requests[model.requests.length - 1];
  return Math.floor(last.nowMs / w) * w;
}

// boundarySentences says what each algorithm did with a boundary run.
export function boundarySentences(model, stats) {
  if (!model.requests.length || !model.windowMs || !model.limit) return [];
  const edge = edgeOf(model);
  const limit = model.limit;
  const out = [];
  for (const alg of model.algorithms) {
    let before = 0;
    let after = 0;
    let first = Infinity;
    let last = -Infinity;
    for (const r of model.requests) {
      const d = r.results[alg];
      if (!d || !d.allowed) continue;
      if (r.nowMs < edge) before++;
      else after++;
      first = Math.min(first, r.nowMs);
      last = Math.max(last, r.nowMs);
    }
    const a = algorithm(alg);
    const name = (a && a.phrase) || alg;
    const n = before + after;
    let s = name + ': ' + n + ' allowed — ' + before + ' just before the edge at ' + fmtUTC(edge) + ' UTC, ' + after + ' just after';
    const max = stats[alg] ? stats[alg].max : n;
    if (max > limit) {
      const times = max / limit;
      const ratio = times === 2 ? 'twice the limit' : (Math.round(times * 10) / 10) + ' × the limit';
      s += ': ' + ratio + ' (' + max + ' of ' + limit + ') in ' + ((last - first) / 1000).toFixed(3) + ' s';
    } else {
      s += ': never more than ' + max + ' of ' + limit + ' in any ' + model.windowMs / 1000 + ' s window';
    }
    out.push({ algorithm: alg, text: s + '.' });
  }
  return out;
}

// renderBoundary writes the sentences into the list el, or empties it.
export function renderBoundary(el, model, stats, traffic) {
  if (!el) return;
  const items = traffic === 'boundary' ? boundarySentences(model, stats) : [];
  el.hidden = items.length === 0;
  el.replaceChildren(...items.map((it) => {
    const li = document.createElement('li');
    li.dataset.algorithm = it.algorithm;
    li.textContent = it.text;
    return li;
  }));
}
