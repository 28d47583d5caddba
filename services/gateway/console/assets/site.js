// site.js: this site's health, ingest buffer backlog and dead letters (admins retry or drop
// them, after a confirmation), replica lag and the main site's reachability.
import * as api from "./api.js";
import { h, table, problemBox, fmtTime, confirmBox } from "./dom.js";

export async function render(main) {
  const admin = api.isAdmin();
  const [health, stats] = await Promise.all([
    api.call("GET", "/health").catch((e) => ({ status: "down", error: e.title })),
    api.call("GET", "/buffer-stats")]);
  const dead = h("div", { id: "dead-letters" });
  const msg = h("div", { "aria-live": "polite" });

  async function loadDead() {
    if (!admin) {
      dead.replaceChildren(table("Latest dead letters", [
        { label: "Task", value: (d) => d.task_id },
        { label: "Type", value: (d) => d.type },
        { label: "Error", value: (d) => d.error },
        { label: "Failed", value: (d) => fmtTime(d.failed_at) },
      ], stats.dead_letters || [], { id: "dead-table" }));
      return;
    }
    try {
      const page = await api.call("GET", "/api/ingest/dead-letters", { query: { limit: 100 } });
      dead.replaceChildren(table(`Dead letters (${page.total})`, [
        { label: "Task", value: (d) => d.task_id },
        { label: "Type", value: (d) => d.type },
        { label: "Error", value: (d) => d.error },
        { label: "Failed", value: (d) => fmtTime(d.failed_at) },
        { label: "Actions", value: (d) => h("span", { class: "actions" },
          h("button", { type: "button", onclick: () => confirmBox(msg, `Retry dead letter ${d.task_id}?`, "Retry", () => act("POST", encodeURIComponent(d.task_id) + "/retry")) }, "Retry"),
          h("button", { type: "button", class: "danger", onclick: () => confirmBox(msg, `Drop dead letter ${d.task_id}? Its writes are lost for good.`, "Drop", () => act("DELETE", encodeURIComponent(d.task_id))) }, "Drop")) },
      ], page.items, { id: "dead-table" }));
    } catch (err) {
      dead.replaceChildren(problemBox(err));
    }
  }
  async function act(method, rest) {
    try {
      await api.call(method, "/api/ingest/dead-letters/" + rest);
      msg.replaceChildren(h("p", { class: "note" }, "Done."));
      await loadDead();
    } catch (err) {
      msg.replaceChildren(problemBox(err));
    }
  }

  const num = (v) => (v === undefined || v === null ? "–" : String(v));
  const mainDB = stats.main || {};
  const comps = [["database", health.database], ["redis", health.redis], ...Object.entries(health.services || {})].filter(([, v]) => v);
  main.replaceChildren(
    h("h1", null, "Site " + (stats.site || "")),
    h("dl", { class: "facts", id: "site-facts" },
      h("dt", null, "Health"), h("dd", { id: "health", class: health.status === "ok" ? "good" : "bad" }, health.status),
      h("dt", null, "Site type"), h("dd", null, num(stats.site_type)),
      h("dt", null, "Pending writes"), h("dd", { id: "pending" }, num(stats.pending)),
      h("dt", null, "Oldest pending write"), h("dd", null, stats.oldest_pending_age_seconds.toFixed(1) + " s"),
      h("dt", null, "Retrying"), h("dd", null, num(stats.retry)),
      h("dt", null, "Dead letters"), h("dd", null, num(stats.archived)),
      h("dt", null, "Replay rate"), h("dd", null, stats.replay_rate_per_second.toFixed(1) + " tasks/s"),
      h("dt", null, "Last apply"), h("dd", null, fmtTime(stats.last_apply_at)),
      h("dt", null, "Main database"), h("dd", { id: "main-db", class: mainDB.reachable ? "good" : "bad" },
        mainDB.reachable ? "reachable" : "unreachable since " + fmtTime(mainDB.since)),
      stats.replica ? [h("dt", null, "Replica lag"), h("dd", null, stats.replica.lag_seconds.toFixed(1) + " s (" + stats.replica.lag_bytes + " bytes)")] : null),
    table("Components", [
      { label: "Component", value: ([k]) => k },
      { label: "Status", value: ([, v]) => v.status + (v.error ? ": " + v.error : "") },
      { label: "Latency", value: ([, v]) => v.latency_ms !== undefined ? v.latency_ms.toFixed(1) + " ms" : "–" },
    ], comps, { id: "components" }),
    msg, dead);
  await loadDead();
}
