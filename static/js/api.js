// HTTP calls to the server's API, answered as {res, data}.

// headers, when given, are added to the request (e.g. Authorization).
export async function api(method, path, body, headers) {
  const init = { method: method, headers: Object.assign({ Accept: 'application/json, application/problem+json' }, headers) };
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

// problemText sums up a problem document (RFC 9457): the status, then each
// bad field or the detail.
export function problemText(res, data) {
  let msg = '';
  if (data && Array.isArray(data.errors) && data.errors.length) {
    msg = data.errors.map((e) => (e.field ? e.field + ': ' : '') + (e.detail || '')).join('; ');
  } else if (data && (data.detail || data.title)) {
    msg = data.detail || data.title;
  }
  return res.status + (msg ? ' ' + msg : ' ' + (res.statusText || 'error'));
}

export function windowQuery(key, policy) {
  return 'key=' + encodeURIComponent(key) + '&policy=' + encodeURIComponent(policy);
}
