// The API: requests with the bearer token, their errors, the token prompt on a 401, and a reader of
// text/event-stream answers (the state stream and the playground's streamed chat).
import { $, showError } from "./dom.js";
import { shared } from "./state.js";

/**
 * Reads a text/event-stream answer to its end, calling `onEvent(event, data)` for each event that
 * has data (the data lines joined; the event name "message" when none is given).
 */
export async function readSse(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length > 0) onEvent(event, data.join("\n"));
    }
  }
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function authHeaders() {
  return shared.token ? { authorization: `Bearer ${shared.token}` } : {};
}

export async function api(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: {
      ...authHeaders(),
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try {
    data = await res.json();
  } catch {
    data = null;
  }
  if (!res.ok) {
    if (res.status === 401) askToken(data?.error?.message ?? "a token is required");
    const err = data?.error ?? {};
    throw new ApiError(
      res.status,
      err.code ?? `http_${res.status}`,
      err.message ?? `HTTP ${res.status}`,
    );
  }
  return data;
}

/** Runs a button's action with the button disabled; errors go to the panel's error line. */
export async function act(button, errorId, fn) {
  button.disabled = true;
  showError(errorId, null);
  try {
    await fn();
  } catch (e) {
    showError(errorId, e);
  } finally {
    button.disabled = false;
  }
}

export function askToken(why) {
  $("token-why").textContent =
    `${why}. Paste a token with the read scope to watch, and admin to change things.`;
  if (!$("token-dialog").open) $("token-dialog").showModal();
}
