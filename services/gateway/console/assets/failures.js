// failures.js: failed operations with their history; admins reset one or all of a kind
// (dry run first, then confirm with a reason), reconcile, and see the inconsistent set.
import * as api from "./api.js";
import { h, table, problemBox, fmtTime, select } from "./dom.js";

const kinds = ["raw_data_package", "data_transfer_package", "transfer", "unpack", "long_term_archive", "staging"];

export async function render(main) {
  const admin = api.isAdmin();
  const list = h("div", { id: "failed" });
  const panel = h("div", { id: "action", "aria-live": "polite" });
  const inconsistent = h("div", { id: "inconsistent" });

  async function refresh() {
    const page = await api.call("GET", "/api/transfer/operations", { query: { status: "FAILED", limit: 200 } });
    const cols = [
      { label: "Operation", value: (o) => o.kind + " " + o.id },
      { label: "Package", value: (o) => o.raw_data_package_id ? h("a", { href: "#/packages/" + o.raw_data_package_id }, o.raw_data_package_id.slice(0, 8) + "…") : (o.data_transfer_package_id ? "DTP " + o.data_transfer_package_id : "–") },
      { label: "Error", value: (o) => (o.last_error_type || "") + (o.last_error ? ": " + o.last_error : "") },
      { label: "Retries", value: (o) => o.retry_count + " / " + o.max_retries },
      { label: "Updated", value: (o) => fmtTime(o.updated_at) },
      { label: "Actions", value: (o) => h("span", { class: "actions" },
        h("button", { type: "button", onclick: () => history(o) }, "History"),
        admin ? h("button", { type: "button", class: "reset", onclick: () => resetOne(o) }, "Reset…") : null) },
    ];
    list.replaceChildren(table(`Failed operations (${page.total})`, cols, page.items, { id: "failed-table" }));
  }

  async function act(fn) {
    try { await fn(); } catch (err) { panel.replaceChildren(problemBox(err, panel.querySelector("form"))); }
  }

  function history(o) {
    return act(async () => {
      const hist = await api.call("GET", `/api/transfer/failure-history/${o.kind}/${o.id}`);
      panel.replaceChildren(table(`History of ${o.kind} ${o.id} (${hist.failures} failures)`, [
        { label: "When", value: (e) => fmtTime(e.at) },
        { label: "Event", value: (e) => e.event },
        { label: "Status", value: (e) => (e.from || "–") + " → " + e.to },
        { label: "By", value: (e) => e.actor },
        { label: "Error / reason", value: (e) => [e.error_type, e.message, e.reason, e.log_path].filter(Boolean).join(" · ") },
      ], hist.events, { id: "history" }));
    });
  }

  // confirmWithReason shows what the dry run found and asks for a reason before doing it.
  function confirmWithReason(summary, doIt) {
    const reason = h("input", { id: "reset-reason", name: "reason", required: true, maxlength: 1000 });
    const form = h("form", { class: "card confirm", id: "reset-confirm" },
      h("h2", null, "Dry run"), summary,
      h("div", { class: "field" }, h("label", { for: "reset-reason" }, "Reason (kept in the history)"), reason),
      h("button", { type: "submit", class: "danger", id: "confirm-reset" }, "Confirm reset"), " ",
      h("button", { type: "button", onclick: () => panel.replaceChildren() }, "Cancel"));
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      act(async () => {
        const done = await doIt(reason.value);
        panel.replaceChildren(h("p", { class: "note", id: "reset-done" }, done));
        await refresh();
      });
    });
    panel.replaceChildren(form);
    reason.focus();
  }

  function resetOne(o) {
    const path = `/api/transfer/operation/${o.kind}/${o.id}/reset`;
    return act(async () => {
      const dry = await api.call("POST", path, { query: { dry_run: true } });
      confirmWithReason(h("p", { id: "dry-run" }, `${o.kind} ${o.id} would become ${dry.status} (retry ${dry.retry_count} of ${dry.max_retries}).`),
        async (reason) => {
          const op = await api.call("POST", path, { query: { reason } });
          return `${o.kind} ${o.id} reset: now ${op.status}.`;
        });
    });
  }

  function resetAll(kind) {
    const path = `/api/transfer/operation/${kind}/reset-all-failed`;
    return act(async () => {
      const dry = await api.call("POST", path, { query: { dry_run: true } });
      if (dry.count === 0) { panel.replaceChildren(h("p", { class: "note" }, `No failed ${kind} operation.`)); return; }
      confirmWithReason(h("p", { id: "dry-run" }, `${dry.count} ${kind} operations would be reset: ${dry.ids.join(", ")}.`),
        async (reason) => {
          const r = await api.call("POST", path, { query: { reason } });
          return `${r.count} ${kind} operations reset.`;
        });
    });
  }

  async function loadInconsistent() {
    try {
      const r = await api.call("GET", "/api/transfer/raw-data-package/inconsistent", { query: { limit: 100 } });
      inconsistent.replaceChildren(table(`Inconsistent packages (${r.count})`, [
        { label: "Package", value: (id) => h("a", { href: "#/packages/" + id }, id) },
        { label: "Actions", value: (id) => admin ? h("button", { type: "button", onclick: () => act(async () => {
          const c = await api.call("POST", `/api/transfer/raw-data-package/${id}/reconcile`);
          panel.replaceChildren(changes(c));
          await loadInconsistent();
        }) }, "Reconcile") : "" },
      ], r.items, { id: "inconsistent-table" }));
    } catch (err) {
      inconsistent.replaceChildren(problemBox(err));
    }
  }

  const tools = admin ? h("form", { class: "card", id: "reset-all" },
    h("h2", null, "Reset all failed of a kind"),
    select("Kind", "kind", kinds.map((k) => [k, k]), "raw_data_package"),
    h("button", { type: "submit" }, "Dry run…"), " ",
    h("button", { type: "button", id: "reconcile-all", onclick: () => act(async () => {
      panel.replaceChildren(changes(await api.call("POST", "/api/transfer/raw-data-package/reconcile-inconsistent")));
      await loadInconsistent();
    }) }, "Reconcile the inconsistent set")) : h("p", { class: "muted" }, "Resets and reconciles are for admins.");
  if (admin) tools.addEventListener("submit", (e) => { e.preventDefault(); resetAll(new FormData(tools).get("kind")); });

  main.replaceChildren(h("h1", null, "Failures"), tools, panel, list, inconsistent);
  await Promise.all([refresh(), loadInconsistent()]);
}

function changes(c) {
  return h("p", { class: "note", id: "reconciled" }, c.count === 0 ? "Nothing changed." :
    c.changes.map((x) => `${x.package_id}: ${x.from} → ${x.to}`).join("; "));
}
