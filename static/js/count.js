// The count readout: "N / L" for the binding rule (the smallest limit), a
// verdict beside it, and each rule's count when a policy has several.

const EVERY_MS = 100; // a busy window's count changes every frame; ten a second can be read

export class CountReadout {
  constructor(ui, writer) {
    this.ui = ui; // {count, verdict, rules}
    this.w = writer;
    this.at = -Infinity;
  }

  // render: rules are the policy's [{limit, windowMs, label}]; reported is
  // the last {count, limit} pair the server sent (a decision's binding rule
  // or a snapshot's longest), used while the page does not hold every entry;
  // blocked is what refuses a request now ('blocked', 'locked'), or ''.
  render(t, model, rules, reported, blocked) {
    const p = performance.now();
    if (p - this.at < EVERY_MS) return;
    this.at = p;
    const rule = bindingRule(rules);
    let n = reported.count;
    let l = reported.limit;
    if (rule && model.exact) {
      n = model.countIn(rule.windowMs, t);
      l = rule.limit;
    } else if (rule && rules.length === 1 && model.known) {
      n = model.count(t);
      l = rule.limit;
    } else if (rule && l === null) {
      l = rule.limit;
    }
    const text = (n === null ? '–' : n) + ' / ' + (l === null ? '–' : l);
    this.w.text(this.ui.count, text);
    this.w.cls(this.ui.count, 'count' + (text.length > 13 ? ' is-longer' : text.length > 9 ? ' is-long' : ''));

    let verdict = '';
    let cls = 'verdict';
    if (blocked) {
      verdict = typeof blocked === 'string' ? blocked : 'blocked';
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
    this.w.text(this.ui.verdict, verdict);
    this.w.cls(this.ui.verdict, cls);
    this.renderRules(t, model, rules);
  }

  renderRules(t, model, rules) {
    if (rules.length < 2) {
      this.w.text(this.ui.rules, '');
      return;
    }
    const parts = rules.map((r) => {
      let n = model.countIn(r.windowMs, t);
      if (n === null && model.snapRules) {
        const s = model.snapRules.find((x) => x.windowMs === r.windowMs);
        if (s && typeof s.count === 'number') n = s.count;
      }
      return r.label + ': ' + (n === null ? '–' : n) + ' / ' + r.limit;
    });
    this.w.text(this.ui.rules, parts.join(' · '));
  }
}

// bindingRule is the rule whose count the page shows: the smallest limit
// (it fills first), the shorter window on a tie.
export function bindingRule(rules) {
  let best = null;
  for (const r of rules) {
    if (!best || r.limit < best.limit || (r.limit === best.limit && r.windowMs < best.windowMs)) best = r;
  }
  return best;
}
