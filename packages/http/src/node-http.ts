// Access to the Node request/response pair under @hono/node-server. Reading the body and watching for
// a client disconnect through them avoids building a full web Request per call (undici headers and a
// web body stream), which is most of the gateway's fixed cost on the chat hot path. Without the pair
// (app.request() in tests, other runtimes) the web Request is used.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Context } from "hono";
import { MiB, ServiceError } from "@ic/protocol";

/** Request bodies above this are refused (a chat body with inline images stays far below). */
export const MAX_BODY_BYTES = 64 * MiB;

interface NodeEnv {
  incoming?: IncomingMessage;
  outgoing?: ServerResponse;
}

export function nodePair(
  c: Context,
): { incoming: IncomingMessage; outgoing: ServerResponse } | undefined {
  const env = c.env as NodeEnv | undefined;
  return env?.incoming && env.outgoing
    ? { incoming: env.incoming, outgoing: env.outgoing }
    : undefined;
}

/**
 * A request header as `c.req.header(name)` reads it (duplicates joined by ", "), taken from the Node
 * request's raw headers when there is one: `c.req.header` builds a web Headers object from every
 * header on first use (~12 µs a request on the chat path). `name` is lower case.
 */
export function requestHeader(c: Context, name: string): string | undefined {
  const incoming = (c.env as NodeEnv | undefined)?.incoming;
  if (!incoming) return c.req.header(name);
  const raw = incoming.rawHeaders;
  let value: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const k = raw[i]!;
    if (k.length === name.length && k.toLowerCase() === name) {
      const v = owsTrimmed(raw[i + 1]!);
      value = value === undefined ? v : `${value}, ${v}`;
    }
  }
  return value;
}

/** `v` without leading and trailing spaces and tabs (what a web Headers object strips). */
function owsTrimmed(v: string): string {
  let a = 0;
  let b = v.length;
  while (a < b && (v.charCodeAt(a) === 0x20 || v.charCodeAt(a) === 0x09)) a++;
  while (b > a && (v.charCodeAt(b - 1) === 0x20 || v.charCodeAt(b - 1) === 0x09)) b--;
  return a === 0 && b === v.length ? v : v.slice(a, b);
}

function tooLarge(maxBytes: number): ServiceError {
  const limit = maxBytes >= MiB ? `${maxBytes / MiB} MiB` : `${maxBytes} bytes`;
  return new ServiceError("invalid_request", `request body is larger than ${limit}`);
}

/**
 * The whole request body. Bodies over `maxBytes` (MAX_BODY_BYTES unless an endpoint's bodies are
 * known to be small) are refused without being kept: the rest is read and discarded, so the client
 * gets its 400 (a client still sending would see a broken pipe if the connection closed) and the
 * connection stays usable.
 */
export async function readBody(c: Context, maxBytes = MAX_BODY_BYTES): Promise<Buffer> {
  const pair = nodePair(c);
  const refuse = (): never => {
    pair?.incoming.resume();
    throw tooLarge(maxBytes);
  };
  const declared = Number(requestHeader(c, "content-length") ?? 0);
  if (declared > maxBytes) refuse();
  if (!pair) {
    const buf = Buffer.from(await c.req.arrayBuffer());
    if (buf.length > maxBytes) refuse();
    return buf;
  }
  const { incoming } = pair;
  const parts: Buffer[] = [];
  let size = 0;
  const complete = await new Promise<boolean>((resolve, reject) => {
    const detach = () => {
      incoming.off("data", onData);
      incoming.off("end", onEnd);
      incoming.off("error", onError);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) {
        detach();
        return resolve(false);
      }
      parts.push(chunk);
    };
    const onEnd = () => {
      detach();
      resolve(true);
    };
    const onError = (e: Error) => {
      detach();
      reject(new ServiceError("invalid_request", `the request body broke off: ${e.message}`));
    };
    incoming.on("data", onData);
    incoming.once("end", onEnd);
    incoming.once("error", onError);
  });
  if (!complete) refuse();
  return parts.length === 1 ? parts[0]! : Buffer.concat(parts, size);
}

/**
 * Calls `onGone` once if the client goes away before the response is complete; returns the
 * function that stops watching.
 */
export function watchClient(c: Context, onGone: () => void): () => void {
  const pair = nodePair(c);
  if (pair) {
    const { outgoing } = pair;
    const onClose = () => {
      if (!outgoing.writableFinished) onGone();
    };
    outgoing.once("close", onClose);
    return () => outgoing.off("close", onClose);
  }
  const signal = c.req.raw.signal;
  signal.addEventListener("abort", onGone, { once: true });
  return () => signal.removeEventListener("abort", onGone);
}
