// packages.js: raw data packages in the transfer pipeline — search by execution, instrument
// module and state; one package's chain and physical copies (#/packages/<id>).
import * as api from "./api.js";
import { h, table, problemBox, field, select, fmtTime, fmtBytes } from "./dom.js";

const states = ["", "WAITING", "TRANSFERRING", "ARCHIVED", "FAILED"];

export async function render(main, args) {
  if (args[0]) return renderOne(main, args[0]);
  const results = h("div", { id: "package-results" });
  const form = h("form", { class: "card inline", id: "package-search", role: "search" },
    field("Execution (executed obs unit id)", { name: "executed_obs_unit_id", autocomplete: "off", size: 36 }),
    field("Instrument module", { name: "instrument_module_id", type: "number", min: 1 }),
    select("State", "state", states.map((s) => [s, s || "any"]), ""),
    h("button", { type: "submit" }, "Search"));
  async function search() {
    const fd = new FormData(form);
    try {
      const page = await api.call("GET", "/api/transfer/raw-packages", { query: {
        executed_obs_unit_id: fd.get("executed_obs_unit_id"), instrument_module_id: fd.get("instrument_module_id"),
        state: fd.get("state"), limit: 100 } });
      results.replaceChildren(table(`Packages (${page.total})`, [
        { label: "Name", value: (p) => h("a", { href: "#/packages/" + p.id }, p.name) },
        { label: "State", value: (p) => p.state },
        { label: "Module", value: (p) => p.instrument_module_id ?? "–" },
        { label: "Size", value: (p) => fmtBytes(p.size_bytes) },
        { label: "DTP", value: (p) => p.data_transfer_package_id ?? "–" },
        { label: "Finalized", value: (p) => fmtTime(p.finalized_at) },
      ], page.items, { id: "package-table" }));
    } catch (err) {
      results.replaceChildren(problemBox(err, form));
    }
  }
  form.addEventListener("submit", (e) => { e.preventDefault(); search(); });
  main.replaceChildren(h("h1", null, "Packages"), form, results);
  await search();
}

async function renderOne(main, id) {
  const p = await api.call("GET", "/api/transfer/raw-packages/" + encodeURIComponent(id));
  main.replaceChildren(
    h("p", null, h("a", { href: "#/packages" }, "← All packages")),
    h("h1", null, "Package " + p.name),
    h("dl", { class: "facts" },
      h("dt", null, "Id"), h("dd", null, h("code", null, p.id)),
      h("dt", null, "State"), h("dd", { id: "package-state" }, p.state),
      h("dt", null, "Size"), h("dd", null, fmtBytes(p.size_bytes)),
      h("dt", null, "Checksum"), h("dd", null, h("code", null, p.checksum || "–")),
      h("dt", null, "Instrument module"), h("dd", null, p.instrument_module_id ?? "–"),
      h("dt", null, "Finalized"), h("dd", null, fmtTime(p.finalized_at))),
    table("Chain", [
      { label: "Operation", value: (s) => s.kind + " " + s.id },
      { label: "Status", value: (s) => s.status },
      { label: "Retries", value: (s) => String(s.retry_count) },
      { label: "Site", value: (s) => s.site },
      { label: "Destination", value: (s) => s.destination_location || "–" },
      { label: "Updated", value: (s) => fmtTime(s.updated_at) },
    ], p.chain || [], { id: "chain" }),
    table("Physical copies", [
      { label: "Location", value: (c) => c.location + " (" + c.location_role + ", " + c.site + ")" },
      { label: "Path", value: (c) => h("code", null, c.path) },
      { label: "Size", value: (c) => fmtBytes(c.size_bytes) },
      { label: "Verified", value: (c) => c.verified_at ? fmtTime(c.verified_at) : "not verified" },
    ], p.physical_copies || [], { id: "copies" }));
}

export { problemBox };
