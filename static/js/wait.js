// One wait per state. After a denial the page shows a single wait: the exact
// one (the denial's retryAfterMs, or a lock's time left), counting down in
// step with the ring. The results of "Try it" carry it as a live span
// (testid wait-left) that renderWaits keeps equal to the ring, frame by
// frame; the Retry-After header, which rounds that wait up to whole seconds,
// is shown beside it labelled as such, so two figures never look like two
// answers to the same question.

// fmtWait writes a wait as the ring does: tenths of a second, rounded up, so
// a wait reads 0.0 s only once it is over.
export function fmtWait(ms) {
  return (Math.ceil(Math.max(0, Math.round(ms)) / 100) / 10).toFixed(1) + ' s';
}

// An answer over HTTP may land a moment before its decision reaches the page
// over the stream: for this long a wait counts down on its own.
const OWN_MS = 1000;

// waitSpan is the live wait of a denial decided at nowMs (Redis ms) with
// retryAfterMs. It shows what the ring counts down (the newest denial, a
// lock; nothing once a reset or refund made room), and its own wait only
// until the page has heard of the denial.
export function waitSpan(nowMs, retryAfterMs) {
  const s = document.createElement('span');
  s.className = 'wait-left';
  s.dataset.testid = 'wait-left';
  s.dataset.retryAt = String((Number(nowMs) || 0) + Math.max(0, Number(retryAfterMs) || 0));
  s.dataset.born = String(performance.now());
  s.title = 'The exact wait (retryAfterMs), counting down with the ring';
  s.textContent = 'retry in ' + fmtWait(retryAfterMs);
  return s;
}

// retryAfterText labels the Retry-After header for what it is.
export function retryAfterText(header) {
  return 'Retry-After: ' + header + ' (whole seconds, rounded up)';
}

// renderWaits updates every live wait under root at t (Redis ms): block is
// what the ring counts down ({retryAt} or null).
export function renderWaits(root, t, block) {
  const p = performance.now();
  for (const s of root.querySelectorAll('.wait-left')) {
    let at = 0;
    if (block) at = block.retryAt;
    else if (p - Number(s.dataset.born) < OWN_MS) at = Number(s.dataset.retryAt) || 0;
    const text = at > t ? 'retry in ' + fmtWait(at - t) : 'room again';
    if (s.textContent !== text) s.textContent = text;
  }
}
