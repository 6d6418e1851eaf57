// Every algorithm the server describes, each joined with its own module,
// ./algorithms/<name>.js: how its state moves on with the clock, how it is
// drawn and said in words. A new algorithm brings its module; nothing here
// or elsewhere names one.

const loaded = new Map(); // name → {…descriptor, …module}

// loadAlgorithms imports the module of every algorithm in table (the
// server's descriptors, or just names), once; an algorithm without a module
// keeps its descriptor alone. It resolves to them all, in table order.
export async function loadAlgorithms(table) {
  const ds = table.map((d) => (typeof d === 'string' ? { name: d } : d));
  await Promise.all(ds.map(async (d) => {
    if (loaded.has(d.name) && loaded.get(d.name).loaded) return;
    let mod = {};
    try {
      mod = (await import('./algorithms/' + encodeURIComponent(d.name) + '.js')).default || {};
    } catch (e) {
      mod = {};
    }
    loaded.set(d.name, Object.assign({}, d, mod, { loaded: true }));
  }));
  return ds.map((d) => loaded.get(d.name));
}

// algorithm is the named algorithm, or null before it is loaded.
export function algorithm(name) {
  return loaded.get(name) || null;
}
