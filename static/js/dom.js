// DOM helpers: finding the page's parts, writing them only when what they
// show changes, so a frame that changes nothing touches nothing, and drawing
// at most once per frame.

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

const HIDDEN_RENDER_MS = 1000;

// drawEveryFrame calls render once per animation frame while the page is
// visible; while hidden, nothing is seen, so once a second keeps it current
// at almost no cost.
export function drawEveryFrame(render) {
  let raf = 0;
  let hiddenTimer = 0;
  function frame() {
    raf = 0;
    render();
    if (!document.hidden) raf = requestAnimationFrame(frame);
  }
  function schedule() {
    if (document.hidden) {
      if (raf) cancelAnimationFrame(raf);
      raf = 0;
      if (!hiddenTimer) hiddenTimer = setInterval(render, HIDDEN_RENDER_MS);
      return;
    }
    if (hiddenTimer) {
      clearInterval(hiddenTimer);
      hiddenTimer = 0;
    }
    if (!raf) raf = requestAnimationFrame(frame);
  }
  document.addEventListener('visibilitychange', schedule);
  schedule();
}
