// The API the console calls, with the key of the browser session (sessionStorage only).

const STORE = "sandboxd.key";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(`${message} (${code}, HTTP ${status})`);
    this.status = status;
    this.code = code;
  }
}

export const session = {
  get key() { return sessionStorage.getItem(STORE); },
  set key(value) {
    if (value) sessionStorage.setItem(STORE, value); else sessionStorage.removeItem(STORE);
  },
  onSignedOut: () => {},
};

function headers(extra = {}) {
  return { Authorization: `Bearer ${session.key}`, ...extra };
}

async function failure(response) {
  let body = {};
  const text = await response.text();
  try { body = JSON.parse(text); } catch { body = { message: text || response.statusText }; }
  const code = typeof body.code === "string" ? body.code : `http_${response.status}`;
  return new ApiError(response.status, code, body.message || response.statusText);
}

/** Calls the API; JSON in and out unless `body` is a Blob/File (sent as bytes) or `raw` is set. */
export async function api(method, path, body, { raw = false } = {}) {
  const init = { method, headers: headers() };
  if (body instanceof Blob) {
    init.body = body;
    init.headers["Content-Type"] = "application/octet-stream";
  } else if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    session.key = null;
    session.onSignedOut("The daemon refused the key (401): sign in again.");
  }
  if (!response.ok) throw await failure(response);
  if (raw) return response;
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

/** Follows `/v1/events` (server-sent events) until `signal` aborts, calling `onEvent(kind, data)`;
 * reconnects when the stream drops. */
export async function followEvents(onEvent, signal) {
  while (!signal.aborted) {
    try {
      const response = await fetch("/v1/events", { headers: headers(), signal });
      if (!response.ok) throw await failure(response);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let kind = "message";
          const data = [];
          for (const line of block.split("\n")) {
            if (line.startsWith("event:")) kind = line.slice(6).trim();
            else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
          }
          if (data.length) {
            try { onEvent(kind, JSON.parse(data.join("\n"))); } catch { /* not JSON: skip */ }
          }
        }
      }
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof ApiError && e.status === 401) return;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

/** A WebSocket to a terminal in sandbox `id`; the key travels as a subprotocol (a browser cannot
 * set headers on a WebSocket). */
export function terminalSocket(id, cols, rows) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const url = `${scheme}://${location.host}/v1/sandboxes/${encodeURIComponent(id)}/terminal?cols=${cols}&rows=${rows}`;
  const socket = new WebSocket(url, ["sandboxd.terminal", `sandboxd.bearer.${session.key}`]);
  socket.binaryType = "arraybuffer";
  return socket;
}
