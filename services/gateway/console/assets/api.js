// api.js: the session (kept in memory only) and calls to the public API with it.

let session = null; // {token, expiresAt, me}

/** Takes the session from the fragment /idp/callback redirected to (#access_token=…), then
 *  removes it from the address bar and the history. Returns true when one was found. */
export function takeSessionFromFragment() {
  const h = location.hash.replace(/^#/, "");
  if (!h.startsWith("access_token=")) return false;
  const p = new URLSearchParams(h);
  session = { token: p.get("access_token"), expiresAt: p.get("expires_at"), me: null };
  history.replaceState(null, "", location.pathname + "#/overview");
  return true;
}

export function signedIn() { return session !== null; }
export function me() { return session && session.me; }
export function isAdmin() { return !!(session && session.me && session.me.user.roles.includes("admin")); }
export function isObserver() {
  return !!(session && session.me && session.me.user.roles.some((r) => r === "observer" || r === "admin"));
}
export function signOut() { session = null; }
export function setMe(m) { if (session) session.me = m; }
export function token() { return session ? session.token : ""; }

/** ProblemError is an RFC 9457 problem answered by the API. */
export class ProblemError extends Error {
  constructor(status, p) {
    super((p && p.title) || ("HTTP " + status));
    this.status = status;
    this.title = (p && p.title) || ("HTTP " + status);
    this.detail = (p && p.detail) || "";
    this.errors = (p && p.errors) || [];
  }
}

function url(path, query) {
  const u = new URL(path, location.origin);
  if (query) {
    for (const [k, v] of Object.entries(query)) {
      if (v !== undefined && v !== null && v !== "") u.searchParams.set(k, String(v));
    }
  }
  return u;
}

/** call sends method path with the session's JWT; JSON in and out. Options: query, body,
 *  contentType (default application/json), accept (e.g. "image/svg+xml": then the answer is a Blob). Throws ProblemError. */
export async function call(method, path, opts = {}) {
  const headers = { Accept: opts.accept || "application/json" };
  if (session) headers.Authorization = "Bearer " + session.token;
  let body;
  if (opts.body !== undefined) {
    headers["Content-Type"] = opts.contentType || "application/json";
    body = JSON.stringify(opts.body);
  }
  let resp;
  for (let attempt = 0; ; attempt++) {
    resp = await fetch(url(path, opts.query), { method, headers, body, credentials: "omit", cache: "no-store" });
    // a read refused for now (429/503 with Retry-After, e.g. the catalog's costly-request
    // bounds) is tried again twice; writes never are
    const wait = Number(resp.headers.get("Retry-After"));
    if (method !== "GET" || attempt >= 2 || (resp.status !== 429 && resp.status !== 503) || !(wait > 0 && wait <= 5)) break;
    await new Promise((r) => setTimeout(r, wait * 1000));
  }
  if (!resp.ok) {
    let p = null;
    try { p = await resp.json(); } catch (_) { /* not JSON */ }
    if (resp.status === 401 && session) {
      window.dispatchEvent(new CustomEvent("obsops:unauthenticated"));
    }
    throw new ProblemError(resp.status, p);
  }
  if (resp.status === 204) return null;
  if (opts.accept && opts.accept !== "application/json") return resp.blob();
  return resp.json();
}

/** wsURL is the WebSocket URL of path with the JWT as ?token= (browsers cannot set headers
 *  on a WebSocket; the services log paths only, never queries). */
export function wsURL(path, query) {
  const u = url(path, Object.assign({}, query, { token: session ? session.token : "" }));
  u.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  return u.toString();
}
