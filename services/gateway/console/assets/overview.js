// overview.js: the transfer funnel and operation states, live over /api/transfer/ws/overview.
import * as api from "./api.js";
import { h, fmtTime } from "./dom.js";

const steps = [
  ["files_registered", "Files registered"],
  ["packages", "Packages"],
  ["dtps_built", "DTPs built"],
  ["dtps_transferred", "Transferred"],
  ["dtps_unpacked", "Unpacked"],
  ["archived", "Archived"],
  ["staged", "Staged"],
];
const kinds = ["raw_data_package", "data_transfer_package", "transfer", "unpack", "long_term_archive", "staging"];
const statuses = ["PENDING", "IN_PROGRESS", "COMPLETED", "FAILED"];

let firstRender = true; // performance.mark once per page load

// Every painted update is marked "obsops:update-shown" (detail: seq, generated — the server's
// generated_at —, received, painted, shown, as epoch ms, and superseded: updates that arrived
// since the previous paint and were never drawn), so a test or an operator's devtools read the
// age of what is on screen. At most markCap marks are kept: the next one clears them all first.
const markName = "obsops:update-shown";
const markCap = 3000;
let marks = 0;
const epochNow = () => performance.timeOrigin + performance.now();

function setLive(state) {
  const el = document.getElementById("live");
  el.textContent = state;
  el.dataset.state = state;
}

export function render(main) {
  const cells = {};
  const rates = {};
  const funnel = h("ol", { class: "funnel", id: "funnel", "aria-label": "Transfer funnel" },
    steps.map(([k, label]) => h("li", null,
      h("span", { class: "label" }, label),
      cells[k] = h("span", { class: "count", "data-key": k }, "–"),
      rates[k] = h("span", { class: "rate" }, ""))));
  const opsBody = h("tbody");
  const ops = h("table", { id: "operations" }, h("caption", null, "Operations by kind and status"),
    h("thead", null, h("tr", null, h("th", { scope: "col" }, "Kind"), statuses.map((s) => h("th", { scope: "col" }, s)))), opsBody);
  const pkgs = h("p", { id: "packages-states" });
  const stamp = h("p", { class: "muted", id: "generated" });
  main.replaceChildren(h("h1", null, "Transfer overview"), funnel, pkgs, ops, stamp);

  let ws = null, closed = false, seq = 0, delay = 250, retry = null;
  let pending = null, frame = 0, prev = null, received = 0, superseded = 0;

  function paint() {
    frame = 0;
    const m = pending;
    pending = null;
    if (!m) return;
    const at = { seq: m.seq, generated: Date.parse(m.generated_at), received, superseded };
    superseded = 0;
    for (const [k] of steps) {
      const v = m.funnel[k];
      cells[k].textContent = String(v);
      if (prev) {
        const dt = (Date.parse(m.generated_at) - Date.parse(prev.generated_at)) / 1000;
        const d = v - prev.funnel[k];
        if (dt > 0 && d >= 0) rates[k].textContent = d > 0 ? "+" + (d / dt * 60).toFixed(0) + "/min" : "";
      }
    }
    prev = m;
    opsBody.replaceChildren(...kinds.map((k) => h("tr", null, h("th", { scope: "row" }, k),
      statuses.map((s) => h("td", { class: s === "FAILED" && (m.operations[k] || {})[s] ? "bad" : null }, String((m.operations[k] || {})[s] || 0))))));
    pkgs.textContent = "Packages: " + Object.entries(m.packages || {}).map(([s, n]) => s.toLowerCase() + " " + n).join(", ");
    stamp.textContent = "Update " + m.seq + " generated " + fmtTime(m.generated_at);
    funnel.dataset.seq = String(m.seq);
    if (firstRender) {
      firstRender = false;
      performance.mark("obsops:funnel-rendered");
    }
    at.painted = epochNow();
    // the next frame's callback runs once the frame holding this update was produced
    requestAnimationFrame(() => {
      at.shown = epochNow();
      if (++marks > markCap) { performance.clearMarks(markName); marks = 1; }
      performance.mark(markName, { detail: at });
    });
  }

  function connect() {
    setLive(seq ? "reconnecting" : "connecting");
    ws = new WebSocket(api.wsURL("/api/transfer/ws/overview", seq ? { since: seq } : {}));
    ws.onmessage = (ev) => {
      const m = JSON.parse(ev.data);
      if (m.type === "snapshot") { setLive("live"); delay = 250; }
      if (m.seq) seq = m.seq;
      if (m.type === "heartbeat" || !m.funnel) return;
      if (pending) superseded++; // drawn over before it was shown: a dropped update
      pending = m; // the newest wins: one paint per frame, never a backlog
      received = epochNow();
      if (!frame) frame = requestAnimationFrame(paint);
    };
    ws.onclose = () => {
      if (closed) return;
      setLive("reconnecting");
      retry = setTimeout(connect, delay);
      delay = Math.min(delay * 2, 4000);
    };
  }
  connect();
  return () => {
    closed = true;
    clearTimeout(retry);
    if (frame) cancelAnimationFrame(frame);
    if (ws) ws.close(1000);
    setLive("");
  };
}
