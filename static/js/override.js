// The per-client override in force for the watched window: the rules an
// operator gave this key (or every key with a prefix) at run time, and the
// note that says why, shown beside the policy (testid `override`,
// `data-override` its label) and hidden while the policy's own rules apply.
// Hello names it, and an override message each change.

import { ruleLabel } from './format.js';

// overrideText says what an override is, as the server renders it:
// "override for prefix acme: — 1000 per 1m, 20000 per 24h — enterprise plan".
export function overrideText(o) {
  const label = String(o.label || '');
  const who = label.startsWith('prefix:') ? 'prefix ' + label.slice('prefix:'.length) : 'this key';
  const rules = (Array.isArray(o.rules) ? o.rules : []).map(ruleLabel).join(', ');
  return 'override for ' + who + ' — ' + rules + (o.note ? ' — ' + o.note : '');
}

export class OverrideLine {
  constructor(el, writer) {
    this.el = el;
    this.w = writer;
    this.o = undefined; // undefined until the stream says: what the server rendered stays
    this.drawn = undefined; // what render last drew
  }

  // show takes the override in force (null: none).
  show(o) {
    this.o = o && typeof o === 'object' && typeof o.label === 'string' ? o : null;
  }

  render() {
    if (this.drawn === this.o) return;
    this.drawn = this.o;
    if (!this.o) {
      this.el.hidden = true;
      this.el.removeAttribute('data-override');
      return;
    }
    this.w.text(this.el, overrideText(this.o));
    this.w.attr(this.el, 'data-override', this.o.label);
    this.el.hidden = false;
  }
}
