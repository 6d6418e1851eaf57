// DOM helpers: finding the page's parts and writing them only when what they
// show changes, so a frame that changes nothing touches nothing.

export function byTestId(id) {
  return document.querySelector('[data-testid="' + id + '"]');
}

export function byId(id) {
  return document.getElementById(id);
}

// span makes <span class=cls>text</span>.
export function span(cls, text) {
  const s = document.createElement('span');
  s.className = cls;
  s.textContent = text;
  return s;
}

// Writer remembers what it last wrote to each element, so repeating the same
// text, class or attribute costs a map lookup and no DOM write.
export class Writer {
  constructor() {
    this.texts = new WeakMap();
    this.classes = new WeakMap();
  }

  text(el, text) {
    if (this.texts.get(el) === text) return;
    this.texts.set(el, text);
    el.textContent = text;
  }

  cls(el, cls) {
    if (this.classes.get(el) === cls) return;
    this.classes.set(el, cls);
    el.setAttribute('class', cls);
  }

  attr(el, name, value) {
    if (el.getAttribute(name) !== value) el.setAttribute(name, value);
  }
}
