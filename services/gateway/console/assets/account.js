// account.js: who am I, and my API tokens (create — the raw value shown once —, regenerate,
// revoke, usage).
import * as api from "./api.js";
import { h, table, problemBox, field, fmtTime, confirmBox } from "./dom.js";

export async function render(main) {
  const m = await api.call("GET", "/auth/me");
  api.setMe(m);
  const [scopes, list] = await Promise.all([api.call("GET", "/api/tokens/scopes"), api.call("GET", "/api/tokens/", { query: { limit: 100 } })]);
  const secret = h("div", { id: "secret", "aria-live": "polite" });
  const form = h("form", { id: "new-token", class: "card" },
    h("h2", null, "New API token"),
    field("Name", { name: "name", required: true, maxlength: 255, autocomplete: "off" }),
    h("fieldset", null, h("legend", null, "Scopes"),
      scopes.scopes.map((s) => h("label", { class: "check", title: s.description },
        h("input", { type: "checkbox", name: "scopes", value: s.name }), " " + s.name))),
    field("Expires in days (1–365)", { name: "expires_in_days", type: "number", min: 1, max: 365, value: 30 }),
    h("button", { type: "submit" }, "Create token"),
    h("div", { class: "form-problem" }));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const fd = new FormData(form);
    const body = { name: fd.get("name"), scopes: fd.getAll("scopes") };
    if (fd.get("expires_in_days")) body.expires_in_days = Number(fd.get("expires_in_days"));
    try {
      const t = await api.call("POST", "/api/tokens/", { body });
      form.querySelector(".form-problem").replaceChildren();
      form.reset();
      showSecret(secret, t, "created");
      await refresh();
    } catch (err) {
      form.querySelector(".form-problem").replaceChildren(problemBox(err, form));
    }
  });

  const tokens = h("div", { id: "tokens" });
  const msg = h("div", { "aria-live": "polite" });
  async function refresh() {
    const page = await api.call("GET", "/api/tokens/", { query: { limit: 100 } });
    draw(page.items || []);
  }
  function draw(items) {
    tokens.replaceChildren(table("My API tokens", [
      { label: "Name", value: (t) => t.name },
      { label: "Prefix", value: (t) => h("code", null, t.prefix) },
      { label: "Scopes", value: (t) => (t.scopes || []).join(", ") || "–" },
      { label: "Expires", value: (t) => fmtTime(t.expires_at) },
      { label: "State", value: (t) => t.revoked_at ? "revoked" : t.is_expired ? "expired" : "active" },
      { label: "Uses", value: (t) => String(t.usage_count) },
      { label: "Actions", value: (t) => t.revoked_at ? "" : h("span", { class: "actions" },
        h("button", { type: "button", onclick: () => usage(t) }, "Usage"),
        h("button", { type: "button", onclick: () => regenerate(t) }, "Regenerate"),
        h("button", { type: "button", class: "danger", onclick: () => revoke(t) }, "Revoke")) },
    ], items, { id: "token-table" }));
  }
  async function act(fn) {
    try { await fn(); } catch (err) { msg.replaceChildren(problemBox(err)); }
  }
  function usage(t) {
    return act(async () => {
      const u = await api.call("GET", `/api/tokens/${t.id}/usage`);
      msg.replaceChildren(h("p", { class: "note" }, `Token “${t.name}”: used ${u.usage_count} times, last ${fmtTime(u.last_used_at)}` +
        (u.last_used_ip ? ` from ${u.last_used_ip}` : "") + "."));
    });
  }
  function regenerate(t) {
    confirmBox(msg, `Regenerate “${t.name}”? The current value stops working at once.`, "Regenerate", () => act(async () => {
      showSecret(secret, await api.call("POST", `/api/tokens/${t.id}/regenerate`), "regenerated");
      msg.replaceChildren();
      await refresh();
    }));
  }
  function revoke(t) {
    confirmBox(msg, `Revoke “${t.name}”? It stops working at once.`, "Revoke", () => act(async () => {
      await api.call("DELETE", `/api/tokens/${t.id}`);
      msg.replaceChildren(h("p", { class: "note", id: "revoked" }, `Token “${t.name}” revoked.`));
      await refresh();
    }));
  }

  main.replaceChildren(
    h("h1", null, "Account"),
    h("dl", { class: "facts", id: "me" },
      h("dt", null, "User"), h("dd", null, m.user.username),
      h("dt", null, "Roles"), h("dd", null, m.user.roles.join(", ")),
      h("dt", null, "Signed in with"), h("dd", null, m.authenticated_by),
      h("dt", null, "Session expires"), h("dd", null, fmtTime(m.expires_at))),
    secret, form, msg, tokens);
  draw(list.items || []);
}

// showSecret shows a raw token once, with a copy button; it is gone at the next page.
function showSecret(box, t, what) {
  const code = h("code", { id: "raw-token", tabindex: 0 }, t.token);
  const status = h("span", { role: "status" });
  box.replaceChildren(h("div", { class: "card secret" },
    h("p", null, h("strong", null, `Token “${t.name}” ${what}. `), "Copy it now: it is shown this once."),
    code, " ",
    h("button", { type: "button", id: "copy-token", onclick: async () => {
      try {
        await navigator.clipboard.writeText(t.token);
        status.textContent = " Copied.";
      } catch (_) {
        getSelection().selectAllChildren(code);
        status.textContent = " Selected: press Ctrl+C to copy.";
      }
    } }, "Copy"),
    status,
    h("button", { type: "button", onclick: () => box.replaceChildren() }, "Done")));
}
