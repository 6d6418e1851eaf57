// Small text formatters shared by the page's parts.

const intFmt = new Intl.NumberFormat('en-US');

// fmtInt writes a whole number with thousands separators: 1,240.
export function fmtInt(n) {
  return intFmt.format(Math.round(Number(n) || 0));
}

// fmtTime is the local wall time of an epoch-ms instant, to the millisecond.
export function fmtTime(ms) {
  if (typeof ms !== 'number' || !isFinite(ms)) return '';
  const d = new Date(ms);
  const p = (n, w) => String(n).padStart(w, '0');
  return p(d.getHours(), 2) + ':' + p(d.getMinutes(), 2) + ':' + p(d.getSeconds(), 2) + '.' + p(d.getMilliseconds(), 3);
}

// fmtUTC is the UTC time of an epoch-ms instant, to the millisecond:
// 1796411553624 → 04:32:33.624.
export function fmtUTC(ms) {
  if (typeof ms !== 'number' || !isFinite(ms)) return '';
  return new Date(ms).toISOString().slice(11, 23);
}

// fmtClock is fmtTime without the milliseconds: 12:03:07.
export function fmtClock(ms) {
  return fmtTime(ms).slice(0, 8);
}

// fmtSeconds renders milliseconds as seconds with three decimals: 9.779.
export function fmtSeconds(ms) {
  return ((Number(ms) || 0) / 1000).toFixed(3);
}

// fmtDuration renders a span compactly: 12 s, 1.5 min, 2 h, 7 d.
export function fmtDuration(ms) {
  const trim = (v) => String(Math.round(v * 10) / 10);
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 120000) return trim(ms / 1000) + ' s';
  if (ms < 120 * 60000) return trim(ms / 60000) + ' min';
  if (ms < 48 * 3600000) return trim(ms / 3600000) + ' h';
  return trim(ms / 86400000) + ' d';
}

// ruleLabel names a rule the way the server does: 5 per 10s, 100 per 1m,
// and a calendar quota by its period: 100000 per month.
export function ruleLabel(r) {
  if (r.period) return r.limit + ' per ' + r.period;
  const w = r.windowMs;
  const unit = w % 3600000 === 0 ? (w / 3600000) + 'h'
    : w % 60000 === 0 ? (w / 60000) + 'm'
      : (w / 1000) + 's';
  return r.limit + ' per ' + unit;
}

export function shortId(s) {
  return s.length > 8 ? s.slice(0, 8) : s;
}

// numberWord writes a small count in words: 5 → "five".
export function numberWord(n) {
  const words = ['no', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten'];
  return n >= 0 && n < words.length ? words[n] : String(n);
}
