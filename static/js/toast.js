// Toasts: short notices in a corner, at most three at a time.

const TOAST_MS = 6000;
const TOASTS_MAX = 3;

let box = null;

export function toastInto(el) {
  box = el;
}

export function toast(text, kind) {
  if (!box) return;
  const t = document.createElement('div');
  t.className = 'toast ' + (kind === 'info' ? 'toast-info' : 'toast-error');
  t.textContent = text;
  box.append(t);
  while (box.children.length > TOASTS_MAX) box.firstElementChild.remove();
  setTimeout(() => t.remove(), TOAST_MS);
}
