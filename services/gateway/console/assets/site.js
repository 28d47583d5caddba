// site.js: this site's health, ingest buffer backlog and dead letters (admins retry or drop
// them, after a confirmation), replica lag and the main site's reachability; at the main site
// also the observatory's status as polled across the WAN (/api/site/observatory, refreshed
// every 2 s while the page is shown).
import * as api from "./api.js";
import { h, table, problemBox, fmtTime, confirmBox } from "./dom.js";

export async function render(main) {
  const admin = api.isAdmin();
  const [health, stats] = await Promise.all([
    api.call("GET", "/health").catch((e) => ({ status: "down", error: e.title })),
    api.call("GET", "/buffer-stats")]);
  const dead = h("div", { id: "dead-letters" });
  const observatory = h("section", { id: "observatory", "aria-live": "polite", hidden: true });
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
    observatory, msg, dead);
  await loadDead();

  // The observatory, seen from the main site (a secondary, or a main watching none: 404).
  let timer = null, gone = false;
  async function loadObservatory() {
    if (stats.site_type !== "main" || gone) return;
    try {
      showObservatory(observatory, await api.call("GET", "/api/site/observatory"));
    } catch (err) {
      if (err.status === 404) return; // none configured: the section stays hidden
      observatory.hidden = false;
      observatory.replaceChildren(h("h2", null, "Observatory"), problemBox(err));
    }
    if (!gone) timer = setTimeout(loadObservatory, 2000);
  }
  await loadObservatory();
  return () => { gone = true; clearTimeout(timer); };
}

function showObservatory(el, o) {
  const s = o.status || {};
  const num = (v) => (v === undefined || v === null ? "–" : String(v));
  const main = s.main || {};
  el.hidden = false;
  el.replaceChildren(
    h("h2", null, "Observatory" + (s.site ? " " + s.site : "")),
    h("dl", { class: "facts", id: "observatory-facts" },
      h("dt", null, "Reachable from here"), h("dd", { id: "observatory-reachable", class: o.reachable ? "good" : "bad", "data-reachable": String(o.reachable) },
        o.reachable ? "reachable" : "unreachable since " + fmtTime(o.unreachable_since)),
      h("dt", null, "Last seen"), h("dd", { id: "observatory-last-seen" }, fmtTime(o.last_seen)),
      h("dt", null, o.reachable ? "Status measured" : "Last status measured"), h("dd", null, fmtTime(s.measured_at)),
      h("dt", null, "Pending writes"), h("dd", { id: "observatory-pending" }, num(s.pending)),
      h("dt", null, "Oldest pending write"), h("dd", null, s.oldest_pending_age_seconds === undefined ? "–" : s.oldest_pending_age_seconds.toFixed(1) + " s"),
      h("dt", null, "Retrying"), h("dd", null, num(s.retry)),
      h("dt", null, "Dead letters"), h("dd", null, num(s.archived)),
      h("dt", null, "Replay rate"), h("dd", null, s.replay_rate_per_second === undefined ? "–" : s.replay_rate_per_second.toFixed(1) + " tasks/s"),
      h("dt", null, "Last apply"), h("dd", null, fmtTime(s.last_apply_at)),
      h("dt", null, "Main database, from there"), h("dd", { class: o.status ? (main.reachable ? "good" : "bad") : null },
        !o.status ? "–" : main.reachable ? "reachable" : "unreachable since " + fmtTime(main.since)),
      s.replica ? [h("dt", null, "Replica lag"), h("dd", null, s.replica.lag_seconds.toFixed(1) + " s (" + s.replica.lag_bytes + " bytes)")] : null));
}
