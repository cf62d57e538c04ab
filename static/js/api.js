// Calls to the box's API: `api` (with the access token, asked for on a 401) and `ApiError`, which
// carries the box's stable error code.

import { askForToken, authHeaders } from "./access-token.js";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function errorFromBody(status, statusText, text) {
  try {
    const body = JSON.parse(text);
    if (body && body.error) {
      return new ApiError(status, body.error.code || `http-${status}`, body.error.message || statusText || "");
    }
  } catch (_) { /* not JSON */ }
  const snippet = (text || "").trim().slice(0, 200);
  return new ApiError(status, `http-${status}`, snippet || statusText || "Request failed");
}

export async function api(method, url, retried) {
  let res;
  try {
    res = await fetch(url, { method, headers: authHeaders({ Accept: "application/json" }), cache: "no-store" });
  } catch (e) {
    throw new ApiError(0, "network-error", "Could not reach the server.");
  }
  if (res.status === 401 && !retried && askForToken()) return api(method, url, true);
  if (res.status === 204) return null;
  const text = await res.text();
  if (!res.ok) throw errorFromBody(res.status, res.statusText, text);
  let body;
  try { body = text ? JSON.parse(text) : null; } catch (_) {
    throw new ApiError(res.status, "bad-response", "Server sent invalid JSON.");
  }
  // Some answers differ by status only (the whole clip: 202 queued now, 200 asked for before).
  if (body && typeof body === "object") Object.defineProperty(body, "httpStatus", { value: res.status });
  return body;
}
