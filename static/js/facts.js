// What the server says of itself on a page's root element (its data-
// attributes), so no module keeps a copy: the client key's alphabet and
// length, where a window lives in Redis, the public sandbox policy, and the
// algorithms (name, title, caption, tradeoff, entries), the default first.

export function readFacts(root) {
  const d = root ? root.dataset : {};
  return {
    keyChars: d.keyChars || '',
    keyMax: Number(d.keyMax) || 0,
    keyHint: d.keyHint || '',
    keyFormat: d.keyFormat || '',
    stateKeyFormat: d.stateKeyFormat || '',
    sandbox: d.sandbox || '',
    algorithms: parseList(d.algorithms),
  };
}

// keyPattern matches a name of the key alphabet, 1 to keyMax long.
export function keyPattern(facts) {
  return new RegExp('^[' + facts.keyChars + ']{1,' + facts.keyMax + '}$');
}

// redisKey is where key's window under policy lives for an algorithm (a
// descriptor): its sorted set when it keeps entries, else its hash. The
// formats name the values <key>, <policy> and <algorithm>.
export function redisKey(facts, key, policy, algorithm) {
  const format = algorithm && algorithm.entries ? facts.keyFormat : facts.stateKeyFormat;
  return format.replace('<key>', () => key).replace('<policy>', () => policy)
    .replace('<algorithm>', () => (algorithm ? algorithm.name : ''));
}

// parseList reads a JSON list from a data- attribute; anything else is [].
export function parseList(raw) {
  try {
    const v = JSON.parse(raw || '[]');
    return Array.isArray(v) ? v : [];
  } catch (e) {
    return [];
  }
}

// policyByName finds a policy of the page's list by name, or null.
export function policyByName(policies, name) {
  return policies.find((p) => p.name === name) || null;
}
