// The status pill: live, reconnecting, redis down, or lagging when what the
// page shows trails the server's clock by more than LAG_MS.

export const LAG_MS = 2000;

// statusOf picks what the pill says; the socket comes first, then Redis,
// then how late the page is.
export function statusOf(connected, redis, behindMs) {
  if (!connected || redis === 'unknown') return 'reconnecting';
  if (redis === 'down') return 'redis down';
  if (behindMs > LAG_MS) return 'lagging';
  return 'live';
}

export function renderStatus(el, writer, s) {
  writer.text(el, s);
  writer.cls(el, 'status status-' + s.replace(' ', '-'));
}
