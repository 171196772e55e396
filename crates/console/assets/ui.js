// Small DOM helpers shared by the views.

/** `el("tag.class#id", {attr: value, onclick: fn}, ...children)`. */
export function el(spec, attrs = {}, ...children) {
  const [, tag, rest] = spec.match(/^([a-z0-9]+)(.*)$/);
  const node = document.createElement(tag);
  for (const part of rest.match(/[.#][^.#]+/g) || []) {
    if (part[0] === ".") node.classList.add(part.slice(1)); else node.id = part.slice(1);
  }
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

/** A table of `rows`, with `columns` as `[heading, row => cell]`. */
export function table(columns, rows, { onRow, id, rowId } = {}) {
  return el(`table${id ? `#${id}` : ""}`, {},
    el("thead", {}, el("tr", {}, columns.map(([h]) => el("th", {}, h)))),
    el("tbody", {}, rows.map((row) => el(onRow ? "tr.link" : "tr",
      { onclick: onRow && (() => onRow(row)), dataset: rowId ? { id: rowId(row) } : undefined },
      columns.map(([, cell]) => el("td", {}, cell(row)))))));
}

export function stateBadge(state) {
  return el(`span.state.${state}`, { "data-state": state }, state);
}

/** Shows an error (or clears it with null). */
export function showError(error) {
  const box = document.getElementById("error");
  if (!error) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = error.message || String(error);
}

/** Runs `work`, showing its error instead of letting it vanish. */
export async function guarded(work) {
  try {
    showError(null);
    return await work();
  } catch (e) {
    showError(e);
    return undefined;
  }
}

export function age(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.round(s)}s`;
  if (s < 3600) return `${Math.round(s / 60)}m`;
  if (s < 86400) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86400)}d`;
}

/** A small line chart of `values` (oldest first) as SVG. */
export function sparkline(values, label) {
  const width = 300, height = 80, max = Math.max(1, ...values);
  const step = values.length > 1 ? width / (values.length - 1) : width;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(height - (v / max) * (height - 8) - 4).toFixed(1)}`);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.classList.add("chart");
  svg.setAttribute("aria-label", label);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points.join(" "));
  svg.append(line);
  return svg;
}
