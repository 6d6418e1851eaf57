// The limiter's clock: Redis's epoch-ms time from the stream's ticks,
// interpolated between them, and how far behind the server what the page
// shows is.

const SLACK_MS = 1000; // corrections smaller than this never run the clock backwards
const LAG_BUCKET_MS = 10000; // the least delay is kept per 10 s…
const LAG_BUCKETS = 12; // …over the last two minutes

export class Clock {
  constructor() {
    this.base = null; // nowMs of the last tick
    this.at = 0; // performance.now() when it arrived
    this.last = 0; // the last value now() returned
    this.lagReset();
  }

  // sync sets the clock from a tick.
  sync(nowMs) {
    if (typeof nowMs !== 'number' || !isFinite(nowMs)) return;
    const p = performance.now();
    this.base = nowMs;
    this.at = p;
    this.lagSample(p - nowMs);
  }

  known() {
    return this.base !== null;
  }

  // now is Redis's clock: the last tick plus the time since it arrived.
  // Small corrections never make it run backwards; large ones (a new
  // server) jump.
  now() {
    if (this.base === null) return null;
    let t = this.base + (performance.now() - this.at);
    if (t < this.last && this.last - t < SLACK_MS) t = this.last;
    this.last = t;
    return t;
  }

  // behindMs estimates how far the clock shown trails the server's. Each
  // tick gives offset = (local time it was handled) − (its nowMs) = a
  // constant (the two clocks' difference) + the time it spent getting here
  // and waiting to be handled. The least offset seen lately is the constant
  // plus the fastest delivery; the last tick's excess over it is how late
  // what is shown is — a busy page or a backed-up stream, not a slow clock.
  behindMs() {
    if (this.lastOffset === null) return 0;
    let min = Infinity;
    for (const b of this.lagMins) if (b.min < min) min = b.min;
    return Math.max(0, this.lastOffset - min);
  }

  // lagReset forgets the delays seen, e.g. for a new connection.
  lagReset() {
    this.lastOffset = null;
    this.lagMins = []; // [{bucket, min}], newest last, at most LAG_BUCKETS
  }

  lagSample(offset) {
    this.lastOffset = offset;
    const bucket = Math.floor(performance.now() / LAG_BUCKET_MS);
    const top = this.lagMins[this.lagMins.length - 1];
    if (top && top.bucket === bucket) {
      if (offset < top.min) top.min = offset;
    } else {
      this.lagMins.push({ bucket: bucket, min: offset });
      if (this.lagMins.length > LAG_BUCKETS) this.lagMins.shift();
    }
  }
}
