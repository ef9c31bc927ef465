// Talking to the server: signing in, JSON calls, blob URLs and the SSE reader.
// The token lives in this page's localStorage, which belongs to its origin alone
// (scheme, host and port: no other server on the machine can read it), and goes out as
// `Authorization: Bearer` on every request. No cookie holds it: a browser sends a
// host's cookies to all of its ports. EventSource can neither send that header nor be
// stopped cleanly mid-read, so the tether stream is read with fetch and parsed here
// (ids, events, multi-line data, comments).

const TOKEN_KEY = "visus-token";
// The server refused the token this page held (it was cleared): the dialog says so.
let refused = false;

function storedToken() {
  try {
    return window.localStorage.getItem(TOKEN_KEY);
  } catch {
    return null; // storage blocked: the dialog asks on every load
  }
}

function keepToken(token) {
  try {
    if (token) window.localStorage.setItem(TOKEN_KEY, token);
    else window.localStorage.removeItem(TOKEN_KEY);
  } catch {
    // storage blocked: the token lives as long as this page (below)
  }
  memoryToken = token || null;
}

let memoryToken = storedToken();

/**
 * Take a `?token=` from the address (the URL visus serve prints) into this origin's
 * storage, and drop it from the URL and history. Whether it is right is known on the
 * first request: a refused one opens the token dialog saying so.
 */
export function takeTokenFromURL() {
  const url = new URL(window.location.href);
  const given = url.searchParams.get("token");
  if (given === null) return;
  url.searchParams.delete("token");
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
  if (given) keepToken(given);
}

/** Whether the server refused the token this page held. */
export function tokenRefused() {
  return refused;
}

/** Check a token with the server and keep it; false when the server refused it. */
export async function signIn(token) {
  const response = await reach("/web/login", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token }),
  });
  if (response.status === 401) return false;
  await checked(response);
  keepToken(token);
  refused = false;
  return true;
}

function headers(extra = {}) {
  return memoryToken ? { ...extra, Authorization: `Bearer ${memoryToken}` } : { ...extra };
}

/** An error answer from the server: `{error: {code, message, limit?}}`. */
export class ApiError extends Error {
  constructor(status, detail) {
    super(detail.message || `HTTP ${status}`);
    this.status = status;
    this.code = detail.code || "";
    this.limit = detail.limit || "";
  }
}

/** The network failed (the server is stopped or restarting): no HTTP answer at all. */
export class NetworkError extends Error {}

// fetch rejects with a bare "Failed to fetch"; say what it means to the person.
async function reach(path, init) {
  try {
    return await fetch(path, init);
  } catch (error) {
    if (error && error.name === "AbortError") throw error;
    throw new NetworkError(
      "Could not reach the visus server (is it stopped or restarting?). Try again when it is back.",
    );
  }
}

async function checked(response) {
  if (response.ok) return response;
  if (response.status === 401 && memoryToken) {
    keepToken(null); // refused: ask again rather than send it on
    refused = true;
  }
  let detail;
  try {
    detail = (await response.json()).error || {};
  } catch {
    detail = { message: `${response.status} ${response.statusText}` };
  }
  throw new ApiError(response.status, detail);
}

export async function getJSON(path) {
  const response = await reach(path, { headers: headers(), cache: "no-store" });
  return (await checked(response)).json();
}

export async function postJSON(path, body) {
  return sendJSON("POST", path, body);
}

/** A JSON request with any method; null for an answer without a body (204). */
export async function sendJSON(method, path, body) {
  const init = { method, headers: headers({ "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = typeof body === "string" ? body : JSON.stringify(body);
  const response = await checked(await reach(path, init));
  return response.status === 204 ? null : response.json();
}

/** POST a file's raw bytes; the answer's bytes come back as a Blob of their type. */
export async function postBytes(path, file) {
  const response = await reach(path, {
    method: "POST",
    headers: headers({ "Content-Type": file.type || "application/octet-stream" }),
    body: file,
  });
  return (await checked(response)).blob();
}

const objectURLs = new Map();

/** An object URL for an authenticated GET (an <img src> cannot carry the token). */
export async function objectURL(path) {
  if (!objectURLs.has(path)) {
    const pending = reach(path, { headers: headers() })
      .then(checked)
      .then((r) => r.blob())
      .then((b) => URL.createObjectURL(b));
    objectURLs.set(path, pending);
    pending.catch(() => objectURLs.delete(path));
  }
  return objectURLs.get(path);
}

/**
 * Read a server-sent event stream until it ends; `onEvent({id, event, data})` per event.
 * Throws ApiError for an error status and whatever fetch throws when the network fails.
 */
export async function readEvents(path, { signal, onEvent, onOpen }) {
  const response = await checked(
    await fetch(path, {
      headers: headers({ Accept: "text/event-stream" }),
      cache: "no-store",
      signal,
    }),
  );
  if (onOpen) onOpen();
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = { id: null, event: "", data: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let start = 0;
    for (;;) {
      const end = buffer.indexOf("\n", start);
      if (end < 0) break;
      let line = buffer.slice(start, end);
      start = end + 1;
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (event.data !== null) onEvent(event);
        event = { id: null, event: "", data: null };
        continue;
      }
      if (line.startsWith(":")) continue; // keep-alive comment
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let text = colon < 0 ? "" : line.slice(colon + 1);
      if (text.startsWith(" ")) text = text.slice(1);
      if (field === "data") event.data = event.data === null ? text : `${event.data}\n${text}`;
      else if (field === "event") event.event = text;
      else if (field === "id") event.id = text;
    }
    buffer = buffer.slice(start);
  }
}

/**
 * POST JSON with upload progress (fetch cannot report it): `onProgress(fraction)` as the
 * body leaves the browser. Resolves to the parsed answer; rejects like postJSON.
 */
export function postJSONWithProgress(path, body, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", path);
    for (const [key, value] of Object.entries(headers({ "Content-Type": "application/json" }))) {
      xhr.setRequestHeader(key, value);
    }
    xhr.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) onProgress(event.loaded / event.total);
    });
    xhr.addEventListener("load", () => {
      let answer = {};
      try {
        answer = JSON.parse(xhr.responseText || "{}");
      } catch {
        answer = {};
      }
      if (xhr.status === 401 && memoryToken) {
        keepToken(null);
        refused = true;
      }
      if (xhr.status >= 200 && xhr.status < 300) resolve(answer);
      else reject(new ApiError(xhr.status, answer.error || { message: `HTTP ${xhr.status}` }));
    });
    xhr.addEventListener("error", () => {
      reject(new NetworkError("Could not reach the visus server (is it stopped or restarting?). Try again when it is back."));
    });
    xhr.send(typeof body === "string" ? body : JSON.stringify(body));
  });
}
