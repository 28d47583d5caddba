// dom.js: building elements without innerHTML (every value is text), tables, problems.

/** h creates an element: h("a", {href: "#/x", class: "c", onclick: fn}, "text", child…). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** table renders rows with columns [{label, value: row => text|Node}] and a caption. */
export function table(caption, cols, rows, attrs) {
  return h("table", attrs,
    h("caption", null, caption),
    h("thead", null, h("tr", null, cols.map((c) => h("th", { scope: "col" }, c.label)))),
    h("tbody", null, rows.length === 0
      ? h("tr", null, h("td", { colspan: cols.length, class: "empty" }, "None."))
      : rows.map((r) => h("tr", null, cols.map((c) => h("td", null, c.value(r)))))));
}

/** problemBox shows an API problem as its title and detail, and marks the form fields its
 *  errors name (body.name → the field named "name") as invalid. */
export function problemBox(err, form) {
  const box = h("div", { class: "problem", role: "alert" },
    h("strong", null, err.title || "Error"), err.detail ? h("p", null, err.detail) : null);
  if (err.errors && err.errors.length) {
    box.append(h("ul", null, err.errors.map((e) => h("li", null, (e.location || "") + ": " + (e.message || "")))));
  }
  if (form) {
    for (const f of form.querySelectorAll("[aria-invalid]")) f.removeAttribute("aria-invalid");
    for (const e of err.errors || []) {
      const name = (e.location || "").replace(/^(body|query|path)\./, "").replace(/\[\d+\]$/, "");
      const field = form.querySelector(`[name="${CSS.escape(name)}"]`);
      if (field) {
        field.setAttribute("aria-invalid", "true");
        field.setAttribute("aria-describedby", "problem-" + name);
        box.id = "problem-" + name;
      }
    }
  }
  return box;
}

/** field is a labelled input. */
export function field(label, attrs) {
  const id = "f-" + attrs.name + "-" + Math.random().toString(36).slice(2, 7);
  return h("div", { class: "field" }, h("label", { for: id }, label), h("input", Object.assign({ id }, attrs)));
}

/** select is a labelled select of options [[value, text]]. */
export function select(label, name, options, value) {
  const id = "f-" + name + "-" + Math.random().toString(36).slice(2, 7);
  return h("div", { class: "field" }, h("label", { for: id }, label),
    h("select", { id, name }, options.map(([v, t]) => h("option", { value: v, selected: v === value }, t))));
}

export function fmtTime(s) {
  if (!s) return "–";
  const d = new Date(s);
  return isNaN(d) ? s : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

export function loading(main, title) {
  main.replaceChildren(h("h1", null, title), h("p", { class: "muted" }, "Loading…"));
}

/** confirmBox asks in place (no modal dialog): text, a confirm button labelled label, Cancel. */
export function confirmBox(box, text, label, onYes) {
  const yes = h("button", { type: "button", class: "danger", id: "confirm" }, label);
  const no = h("button", { type: "button" }, "Cancel");
  yes.addEventListener("click", () => { yes.disabled = true; onYes(); });
  no.addEventListener("click", () => box.replaceChildren());
  box.replaceChildren(h("div", { class: "card confirm", role: "alertdialog", "aria-label": label }, h("p", null, text), yes, " ", no));
  yes.focus();
}
