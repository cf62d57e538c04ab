// The access token a box with tokens asks for, kept in this browser.

// A box with access tokens answers 401 to /v1 calls without one: the page asks once and keeps it in
// this browser. Event streams and download links cannot send headers, so they carry it as
// ?access_token= (GET only).
const TOKEN_KEY = "vaebox-token";
export function token() { return localStorage.getItem(TOKEN_KEY) || ""; }
export function authHeaders(headers) {
  const t = token();
  return t ? Object.assign({}, headers, { Authorization: `Bearer ${t}` }) : headers;
}
export function withToken(url) {
  const t = token();
  if (!t || !url) return url;
  return `${url}${url.includes("?") ? "&" : "?"}access_token=${encodeURIComponent(t)}`;
}
export function askForToken() {
  const given = window.prompt("This box needs an access token. Paste yours (it is kept in this browser):", "");
  if (given === null || !given.trim()) return false;
  localStorage.setItem(TOKEN_KEY, given.trim());
  return true;
}
