// app.js: the console's entry point — session, navigation and the page router (#/page/arg).
import * as api from "./api.js";
import { h, problemBox } from "./dom.js";
import * as overview from "./overview.js";
import * as account from "./account.js";
import * as failures from "./failures.js";
import * as packages from "./packages.js";
import * as site from "./site.js";
import * as astro from "./astro.js";

const pages = {
  overview: overview.render,
  failures: failures.render,
  packages: packages.render,
  site: site.render,
  programs: astro.renderPrograms,
  sources: astro.renderSources,
  account: account.render,
};

const main = document.getElementById("main");
let leave = null; // the current page's clean-up (e.g. closing its WebSocket)
let shown = 0; // the number of the route being shown: each navigation takes the next
let whoami = null; // the /auth/me of the sign-in: pages but the overview wait for it (roles)

function signInPage(note) {
  shown++; // a page still loading must not replace the sign-in
  document.getElementById("nav").hidden = true;
  document.getElementById("signout").hidden = true;
  document.getElementById("who").textContent = "";
  document.getElementById("live").textContent = "";
  main.replaceChildren(
    h("h1", null, "Sign in"),
    note ? h("p", { class: "problem", role: "alert" }, note) : null,
    h("p", null, "The console acts with your own account: sign in with the site's identity provider."),
    h("p", null, h("a", { class: "button", href: "/idp/login", id: "signin" }, "Sign in")),
    h("p", { class: "muted" }, "Your session stays in this tab's memory only: reloading the page signs you out."));
}

// viewOf is the <main> route number n's page writes to: once the reader has gone on to another
// page, the late answers of this one change nothing (a slow program's page would otherwise
// replace the faster page the reader went to after it).
function viewOf(n) {
  return { replaceChildren: (...nodes) => { if (n === shown) main.replaceChildren(...nodes); } };
}

async function route() {
  if (leave) { leave(); leave = null; }
  const n = ++shown;
  if (!api.signedIn()) { signInPage(); return; }
  const [name, ...args] = location.hash.replace(/^#\/?/, "").split("/");
  const page = pages[name] ? name : "overview";
  if (page !== "overview" && whoami) {
    try { await whoami; } catch (_) { return; } // start() shows the sign-in page
  }
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.getAttribute("href") === "#/" + page) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const view = viewOf(n);
  try {
    const cleanUp = (await pages[page](view, args.map(decodeURIComponent))) || null;
    if (n === shown) leave = cleanUp;
    else if (cleanUp) cleanUp(); // the reader left before the page was ready: close what it opened
  } catch (err) {
    view.replaceChildren(h("h1", null, "Error"), problemBox(err));
  }
}

async function start() {
  api.takeSessionFromFragment();
  document.getElementById("skip").addEventListener("click", (e) => { e.preventDefault(); main.focus(); });
  document.getElementById("signout").addEventListener("click", () => {
    api.signOut();
    history.replaceState(null, "", location.pathname);
    route();
  });
  window.addEventListener("obsops:unauthenticated", () => {
    api.signOut();
    signInPage("Your session has expired or was revoked: sign in again.");
  });
  window.addEventListener("hashchange", () => { if (location.hash.startsWith("#/")) route(); });
  if (!api.signedIn()) { route(); return; }
  // who am I and the first page at once: the overview's socket need not wait for /auth/me
  whoami = api.call("GET", "/auth/me");
  document.getElementById("nav").hidden = false;
  document.getElementById("signout").hidden = false;
  route();
  try {
    api.setMe(await whoami);
  } catch (err) {
    if (leave) { leave(); leave = null; }
    api.signOut();
    signInPage("Sign-in failed: " + (err.detail || err.title));
    return;
  }
  const m = api.me();
  document.getElementById("who").textContent = m.user.username + " (" + m.user.roles.join(", ") + ")";
}

start();
