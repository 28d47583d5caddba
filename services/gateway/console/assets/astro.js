// astro.js: the astronomers' pages — programs with their obs units and visibility heatmap,
// a source search (text, cone, name resolution) and a source's visibility for a chosen night.
import * as api from "./api.js";
import { h, table, problemBox, field, fmtTime } from "./dom.js";

const reasons = {
  rises_above_limit: "rises above the elevation limit", sets_below_limit: "sets below the elevation limit",
  leaves_sun_avoidance: "leaves the Sun-avoidance zone", enters_sun_avoidance: "enters the Sun-avoidance zone",
  range_start: "night starts", range_end: "night ends",
};

// plot fetches an image with the session's credential and shows it as a blob: URL.
async function plot(path, query, alt, id) {
  const blob = await api.call("GET", path, { query, accept: "image/svg+xml" });
  const img = h("img", { src: URL.createObjectURL(blob), alt, id, class: "plot" });
  img.addEventListener("load", () => URL.revokeObjectURL(img.src), { once: true });
  return img;
}

export async function renderPrograms(main, args) {
  if (args[0]) return renderProgram(main, args[0]);
  const page = await api.call("GET", "/observing_program/", { query: { limit: 200 } });
  main.replaceChildren(h("h1", null, "Observing programs"), api.isObserver() ? newProgramForm() : null, table(`Programs (${page.total})`, [
    { label: "Program", value: (p) => h("a", { href: "#/programs/" + p.id }, p.short_name) },
    { label: "Title", value: (p) => p.title },
    { label: "PI", value: (p) => p.pi },
    { label: "Status", value: (p) => p.status },
    { label: "Obs units", value: (p) => String((p.obs_units || []).length) },
  ], page.items, { id: "program-table" }));
}

// newProgramForm creates a program (observers and admins); its obs units are added with the API
// (PUT with obs_units) or the catalogue's tools.
function newProgramForm() {
  const form = h("form", { class: "card", id: "new-program" },
    h("h2", null, "New program"),
    h("div", { class: "card inline" },
      field("Short name", { name: "short_name", required: true, maxlength: 64, autocomplete: "off" }),
      field("Title", { name: "title", required: true, maxlength: 500, size: 40 }),
      field("PI", { name: "pi", required: true, maxlength: 255 }),
      h("div", { class: "field" }, h("label", { for: "np-status" }, "Status"),
        h("select", { id: "np-status", name: "status" }, ["draft", "active", "completed", "archived"].map((v) => h("option", { value: v }, v)))),
      field("Allocated hours", { name: "allocated_hours", type: "number", min: 0, step: "any" })),
    h("button", { type: "submit" }, "Create program"),
    h("div", { class: "form-problem" }));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const fd = new FormData(form);
    const body = { short_name: fd.get("short_name"), title: fd.get("title"), pi: fd.get("pi"), status: fd.get("status"), obs_units: [] };
    if (fd.get("allocated_hours")) body.allocated_hours = Number(fd.get("allocated_hours"));
    try {
      const p = await api.call("POST", "/observing_program/", { body });
      location.hash = "#/programs/" + p.id;
    } catch (err) {
      form.querySelector(".form-problem").replaceChildren(problemBox(err, form));
    }
  });
  return form;
}

async function renderProgram(main, id) {
  const p = await api.call("GET", "/observing_program/" + encodeURIComponent(id));
  const year = new Date().getUTCFullYear();
  const heat = h("div", { id: "heatmap" }, h("p", { class: "muted" }, "Loading the heatmap…"));
  main.replaceChildren(
    h("p", null, h("a", { href: "#/programs" }, "← All programs")),
    h("h1", null, p.short_name + ": " + p.title),
    h("dl", { class: "facts" }, h("dt", null, "PI"), h("dd", null, p.pi), h("dt", null, "Status"), h("dd", null, p.status),
      h("dt", null, "Allocated"), h("dd", null, p.allocated_hours == null ? "–" : p.allocated_hours + " h")),
    p.description ? h("p", null, p.description) : null,
    table("Obs units", [
      { label: "Name", value: (u) => u.name },
      { label: "Source", value: (u) => h("a", { href: "#/sources/" + u.source_id }, u.source_name) },
      { label: "Module", value: (u) => String(u.instrument_module_id) },
      { label: "Duration", value: (u) => (u.duration_s / 3600).toFixed(2) + " h" },
      { label: "Min. elevation", value: (u) => u.min_elevation_deg == null ? "site" : u.min_elevation_deg + "°" },
      { label: "Constraints", value: constraintsText },
    ], p.obs_units || [], { id: "obs-units" }),
    mayEdit(p) ? editProgramForm(p, main) : null,
    h("h2", null, `Hours observable per day in ${year}`), heat);
  try {
    heat.replaceChildren(await plot("/visibility/heatmap", { year, program_id: p.id, format: "svg" }, `Heatmap of the hours each source of ${p.short_name} is observable per day of ${year}`, "heatmap-img"));
  } catch (err) {
    heat.replaceChildren(problemBox(err));
  }
}

export async function renderSources(main, args) {
  if (args[0]) return renderSource(main, args[0], args[1]);
  const results = h("div", { id: "source-results" });
  const resolved = h("div", { "aria-live": "polite" });
  const text = h("form", { class: "card inline", role: "search", id: "source-search" },
    field("Name or alias contains", { name: "q", autocomplete: "off" }), h("button", { type: "submit" }, "Search"));
  const cone = h("form", { class: "card inline", role: "search", id: "cone-search" },
    field("RA (deg)", { name: "ra_deg", inputmode: "decimal", size: 9 }), field("Dec (deg)", { name: "dec_deg", inputmode: "decimal", size: 9 }),
    field("Radius (deg)", { name: "radius_deg", inputmode: "decimal", size: 5, value: "1" }), h("button", { type: "submit" }, "Cone search"));
  const resolve = h("form", { class: "card inline", id: "resolve" },
    field("Resolve a name or position (e.g. M42, Vega, 05 35 14 -05 22 30)", { name: "name", autocomplete: "off", size: 30 }),
    h("button", { type: "submit" }, "Resolve"));

  async function search(form, query) {
    try {
      const page = await api.call("GET", "/sources/", { query: Object.assign({ limit: 100 }, query) });
      results.replaceChildren(table(`Sources (${page.total})`, [
        { label: "Name", value: (s) => h("a", { href: "#/sources/" + s.id }, s.name) },
        { label: "Kind", value: (s) => s.kind },
        { label: "RA", value: (s) => s.ra_deg == null ? "–" : s.ra_deg.toFixed(4) },
        { label: "Dec", value: (s) => s.dec_deg == null ? "–" : s.dec_deg.toFixed(4) },
        { label: "Distance", value: (s) => s.distance_deg == null ? "–" : s.distance_deg.toFixed(3) + "°" },
        { label: "Aliases", value: (s) => (s.aliases || []).join(", ") },
      ], page.items, { id: "source-table" }));
    } catch (err) {
      results.replaceChildren(problemBox(err, form));
    }
  }
  text.addEventListener("submit", (e) => { e.preventDefault(); search(text, { q: new FormData(text).get("q") }); });
  cone.addEventListener("submit", (e) => {
    e.preventDefault();
    const fd = new FormData(cone);
    search(cone, { ra_deg: fd.get("ra_deg"), dec_deg: fd.get("dec_deg"), radius_deg: fd.get("radius_deg") });
  });
  resolve.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const r = await api.call("POST", "/sources/resolve", { body: { name: new FormData(resolve).get("name") } });
      const a = (r.results || [r])[0];
      if (!a.found) { resolved.replaceChildren(h("p", { class: "problem", role: "alert" }, "Not found" + (a.error ? ": " + a.error : "."))); return; }
      resolved.replaceChildren(h("p", { class: "note" }, `${a.name || a.input}: RA ${a.ra_deg.toFixed(4)}°, Dec ${a.dec_deg.toFixed(4)}° (${a.resolver}). Sources within the cone:`));
      cone.elements.ra_deg.value = a.ra_deg.toFixed(5);
      cone.elements.dec_deg.value = a.dec_deg.toFixed(5);
      search(cone, { ra_deg: a.ra_deg, dec_deg: a.dec_deg, radius_deg: cone.elements.radius_deg.value || 1 });
    } catch (err) {
      resolved.replaceChildren(problemBox(err, resolve));
    }
  });
  main.replaceChildren(h("h1", null, "Sources"), text, cone, resolve, resolved, results);
  await search(text, {});
}

// nightRange is the night starting on date (YYYY-MM-DD) at the site: 18:00 UTC to 12:00 UTC
// the next day (local evening to morning in the Atacama, UTC−4).
function nightRange(date) {
  const start = new Date(date + "T18:00:00Z");
  return { start: start.toISOString().replace(".000", ""), end: new Date(start.getTime() + 18 * 3600e3).toISOString().replace(".000", "") };
}

async function renderSource(main, id, night) {
  const s = await api.call("GET", `/sources/${encodeURIComponent(id)}/details`);
  const date = night || new Date().toISOString().slice(0, 10);
  const form = h("form", { class: "card inline", id: "night-form" },
    field("Night starting", { name: "night", type: "date", value: date, required: true }), h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (e) => { e.preventDefault(); location.hash = `#/sources/${id}/${new FormData(form).get("night")}`; });
  const vis = h("div", { id: "visibility" }, h("p", { class: "muted" }, "Computing visibility…"));
  const src = s.source || s;
  main.replaceChildren(
    h("p", null, h("a", { href: "#/sources" }, "← Source search")),
    h("h1", null, src.name),
    h("dl", { class: "facts" },
      h("dt", null, "Kind"), h("dd", null, src.kind),
      src.ra_deg != null ? [h("dt", null, "RA / Dec"), h("dd", null, src.ra_deg.toFixed(5) + "°, " + src.dec_deg.toFixed(5) + "°")] : null,
      h("dt", null, "Type"), h("dd", null, src.object_type || "–"),
      h("dt", null, "Aliases"), h("dd", null, (src.aliases || s.aliases || []).join(", ") || "–")),
    form, vis);
  const q = Object.assign(nightRange(date), { step_s: 600 });
  try {
    // one after the other: the catalog bounds each user's (and replica's) costly requests
    const v = await api.call("GET", "/visibility/" + encodeURIComponent(id), { query: q });
    const img = await plot("/visibility/" + encodeURIComponent(id), q, `Altitude of ${src.name} through the night starting ${date}`, "visibility-plot");
    vis.replaceChildren(
      h("h2", null, `Night starting ${date} (UTC ${fmtTime(q.start)} – ${fmtTime(q.end)})`),
      img,
      h("p", null, `Observable ${v.hours_observable.toFixed(2)} h; highest altitude ${v.max_alt_deg.toFixed(1)}°; rise ${fmtTime(v.rise)}, transit ${fmtTime(v.transit)}, set ${fmtTime(v.set)}.`),
      table("Observing windows", [
        { label: "From", value: (w) => fmtTime(w.start) },
        { label: "Because it", value: (w) => reasons[w.start_reason] || w.start_reason },
        { label: "To", value: (w) => fmtTime(w.end) },
        { label: "Because it", value: (w) => reasons[w.end_reason] || w.end_reason },
      ], v.windows || [], { id: "windows" }));
  } catch (err) {
    vis.replaceChildren(problemBox(err));
  }
}

// mayEdit mirrors the catalog's ownership rule (docs/api.md "Program ownership") to decide
// whether to offer the Edit form: admins and the PI change everything, members the obs units.
// The API refuses anybody else anyway.
function mayEdit(p) {
  const m = api.me();
  if (!m || !p.pi_username) return false;
  return api.isAdmin() || p.pi_username === m.user.username || (p.members || []).includes(m.user.username);
}

// The obs unit's constraints besides the minimum elevation (GET /visibility/{id}?obs_unit_id=
// applies them). The Edit form does not edit them but keeps them: a save must not drop them.
const constraintFields = ["max_airmass", "min_moon_separation_deg", "min_sun_separation_deg", "max_pwv_mm", "lst_range", "time_windows"];

// constraintsText summarises a unit's constraints ("–" for none).
function constraintsText(u) {
  const parts = [];
  if (u.max_airmass != null) parts.push("airmass ≤ " + u.max_airmass);
  if (u.min_moon_separation_deg != null) parts.push("Moon ≥ " + u.min_moon_separation_deg + "°");
  if (u.min_sun_separation_deg != null) parts.push("Sun ≥ " + u.min_sun_separation_deg + "°");
  if (u.max_pwv_mm != null) parts.push("PWV ≤ " + u.max_pwv_mm + " mm");
  if (u.lst_range) parts.push("LST " + u.lst_range.start_hours + "–" + u.lst_range.end_hours + " h");
  if (u.time_windows && u.time_windows.length) parts.push(u.time_windows.length + " time window" + (u.time_windows.length > 1 ? "s" : ""));
  return parts.length ? parts.join(", ") : "–";
}

// unitRow is one editable obs unit of the Edit form.
function unitRow(u) {
  const tr = h("tr", { class: "unit" },
    h("td", null, h("input", { name: "unit_name", value: u.name || "", required: true, size: 12 })),
    h("td", null, h("input", { name: "unit_source_id", type: "number", value: u.source_id == null ? "" : u.source_id, required: true })),
    h("td", null, h("input", { name: "unit_module", type: "number", value: u.instrument_module_id == null ? "" : u.instrument_module_id, required: true })),
    h("td", null, h("input", { name: "unit_duration_s", type: "number", min: 0, step: "any", value: u.duration_s == null ? "" : u.duration_s, required: true })),
    h("td", null, h("input", { name: "unit_min_elevation_deg", type: "number", step: "any", value: u.min_elevation_deg == null ? "" : u.min_elevation_deg })),
    h("td", null, h("input", { name: "unit_priority", type: "number", value: u.priority == null ? "" : u.priority })),
    h("td", null, h("button", { type: "button", class: "remove-unit" }, "Remove")));
  tr.querySelector(".remove-unit").addEventListener("click", () => tr.remove());
  tr.kept = Object.fromEntries(constraintFields.filter((f) => u[f] != null).map((f) => [f, u[f]]));
  return tr;
}

// editProgramForm edits a program and its obs units, saved as a JSON merge patch; a PI or admin
// sends the program's fields and units, a member only the units (the rest is not theirs); a save
// shows the program again in main, the page's view.
function editProgramForm(p, main) {
  const owner = api.isAdmin() || p.pi_username === api.me().user.username;
  const units = h("tbody", null, (p.obs_units || []).map(unitRow));
  const form = h("form", { class: "card", id: "edit-program", hidden: true },
    h("h2", null, "Edit program"),
    owner ? h("div", { class: "card inline" },
      field("Title", { name: "title", required: true, maxlength: 500, size: 40, value: p.title }),
      field("Description", { name: "description", size: 40, value: p.description || "" }),
      h("div", { class: "field" }, h("label", { for: "ep-status" }, "Status"),
        h("select", { id: "ep-status", name: "status" }, ["draft", "active", "completed", "archived"].map((v) => h("option", { value: v, selected: v === p.status }, v)))),
      field("Allocated hours", { name: "allocated_hours", type: "number", min: 0, step: "any", value: p.allocated_hours == null ? "" : p.allocated_hours }),
      field("Members (comma-separated usernames)", { name: "members", size: 30, value: (p.members || []).join(", ") })) : null,
    h("table", { id: "edit-units" }, h("caption", null, "Obs units"),
      h("thead", null, h("tr", null, ["Name", "Source id", "Module", "Duration (s)", "Min. elevation (°)", "Priority", ""].map((c) => h("th", null, c)))),
      units),
    h("button", { type: "button", id: "add-unit" }, "Add obs unit"),
    h("button", { type: "submit" }, "Save"),
    h("div", { class: "form-problem" }));
  form.querySelector("#add-unit").addEventListener("click", () => units.append(unitRow({})));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const fd = new FormData(form);
    const num = (v) => (v === "" || v === null ? undefined : Number(v));
    const body = {
      obs_units: [...units.querySelectorAll("tr.unit")].map((tr) => {
        const v = (n) => tr.querySelector(`[name="${n}"]`).value;
        return { ...tr.kept, name: v("unit_name"), source_id: num(v("unit_source_id")), instrument_module_id: num(v("unit_module")),
          duration_s: num(v("unit_duration_s")), min_elevation_deg: num(v("unit_min_elevation_deg")), priority: num(v("unit_priority")) };
      }),
    };
    if (owner) {
      body.title = fd.get("title");
      body.description = fd.get("description") || null;
      body.status = fd.get("status");
      body.allocated_hours = fd.get("allocated_hours") === "" ? null : Number(fd.get("allocated_hours"));
      body.members = String(fd.get("members") || "").split(",").map((s) => s.trim()).filter(Boolean);
    }
    try {
      await api.call("PATCH", "/observing_program/" + encodeURIComponent(p.id), { body, contentType: "application/merge-patch+json" });
      await renderProgram(main, p.id);
    } catch (err) {
      form.querySelector(".form-problem").replaceChildren(problemBox(err, form));
    }
  });
  const toggle = h("button", { type: "button", id: "edit-program-button" }, "Edit");
  toggle.addEventListener("click", () => { form.hidden = !form.hidden; });
  return h("div", null, toggle, form);
}
