/** Small DOM helpers of the run widget. */

export function h(tag: string, cls: string, html = ''): HTMLElement {
  const e = document.createElement(tag);
  e.className = cls;
  if (html) {
    e.innerHTML = html;
  }
  return e;
}

export function button(label: string, cls: string, title: string): HTMLButtonElement {
  const b = document.createElement('button');
  b.textContent = label;
  b.className = `sl-btn ${cls}`;
  b.title = title;
  return b;
}
