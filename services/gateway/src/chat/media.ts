// Images given by URL. llama-server downloads an http(s) image itself, from the engine's host, and
// reads file:// ones from its disk when told a directory: neither may a client make an engine do.
// So the gateway never passes such a URL on. With chat.fetch_image_urls on, it fetches the image
// itself (bounded in bytes and time, only from chat.image_url_hosts when that is set, only
// `image/*`) and sends it on as a data: URL; otherwise the request is refused, saying how to send it.
import { ServiceError } from "@ic/protocol";

/** Where an image URL sits in a body: read it, replace it. */
interface MediaRef {
  readonly url: string;
  set(url: string): void;
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null;

/**
 * The image URLs of a chat, Responses or Anthropic body: chat's `image_url` parts (`{url}` or a
 * string), the Responses API's `input_image` parts (`image_url`), Anthropic's image blocks with a
 * `{type: "url", url}` source.
 */
export function mediaRefs(body: Json): MediaRef[] {
  const refs: MediaRef[] = [];
  const turns = [body.messages, body.input].flatMap((x) => (Array.isArray(x) ? x : []));
  for (const turn of turns) {
    const content = isObject(turn) ? turn.content : undefined;
    if (!Array.isArray(content)) continue;
    for (const part of content) {
      if (!isObject(part)) continue;
      const ref = refOf(part);
      if (ref) refs.push(ref);
    }
  }
  return refs;
}

function refOf(part: Json): MediaRef | undefined {
  if (part.type === "image_url" || part.type === "input_image") {
    const holder = part.image_url;
    if (typeof holder === "string") return { url: holder, set: (u) => void (part.image_url = u) };
    if (isObject(holder) && typeof holder.url === "string")
      return { url: holder.url, set: (u) => void (holder.url = u) };
  }
  if (part.type === "image" && isObject(part.source) && part.source.type === "url") {
    const source = part.source;
    if (typeof source.url === "string")
      return {
        url: source.url,
        // Anthropic's inline form: the bytes and their type.
        set: (u) => {
          const m = /^data:([^;,]+);base64,(.*)$/s.exec(u);
          part.source = { type: "base64", media_type: m?.[1] ?? "image/png", data: m?.[2] ?? "" };
        },
      };
  }
  return undefined;
}

export interface MediaPolicy {
  /** chat.fetch_image_urls: the gateway fetches http(s) images itself. */
  readonly fetch: boolean;
  /** chat.image_url_hosts: the hosts it may fetch from (`*.example.com` matches subdomains); empty: any. */
  readonly hosts: readonly string[];
  readonly maxBytes: number;
  readonly timeoutMs: number;
}

/** The remote images of `body` fetched and inlined as data: URLs, or the refusal that says why not. */
export async function inlineRemoteMedia(body: Json, policy: MediaPolicy): Promise<void> {
  for (const ref of mediaRefs(body)) {
    const url = remoteUrl(ref.url);
    if (url) ref.set(await fetchImage(checked(url, policy), policy));
  }
}

/**
 * The URL when `raw` names a place (any scheme but data:); undefined for what llama-server reads
 * as the image itself (a data: URL, or raw base64).
 */
function remoteUrl(raw: string): URL | undefined {
  if (raw.startsWith("data:")) return undefined;
  try {
    return new URL(raw);
  } catch {
    return undefined;
  }
}

function checked(url: URL, policy: MediaPolicy): URL {
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw refusal(`image URLs must be data: or http(s) URLs, not ${url.protocol}`);
  if (!policy.fetch)
    throw refusal(
      `this cluster does not fetch image URLs (chat.fetch_image_urls is off): send the image inline as a data: URL (data:image/png;base64,...)`,
    );
  if (policy.hosts.length > 0 && !policy.hosts.some((h) => hostMatches(url.hostname, h)))
    throw refusal(
      `image URLs from ${url.hostname} are not fetched (chat.image_url_hosts: ${policy.hosts.join(", ")})`,
    );
  return url;
}

/** `pattern` is a host name, or `*.` and a domain (which matches its subdomains, not itself). */
function hostMatches(host: string, pattern: string): boolean {
  const h = host.toLowerCase();
  const p = pattern.toLowerCase();
  return p.startsWith("*.") ? h.endsWith(p.slice(1)) : h === p;
}

async function fetchImage(url: URL, policy: MediaPolicy): Promise<string> {
  let res: Response;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(policy.timeoutMs), redirect: "error" });
  } catch (e) {
    throw refusal(`the image at ${url.href} could not be fetched: ${(e as Error).message}`);
  }
  const type = (res.headers.get("content-type") ?? "").split(";")[0]!.trim();
  if (!res.ok) {
    await res.body?.cancel();
    throw refusal(`the image at ${url.href} answered ${res.status}`);
  }
  if (!type.startsWith("image/")) {
    await res.body?.cancel();
    throw refusal(`the URL ${url.href} is not an image (content-type ${type || "none"})`);
  }
  const parts: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    size += chunk.length;
    // Leaving the loop cancels the body.
    if (size > policy.maxBytes)
      throw refusal(`the image at ${url.href} is larger than ${policy.maxBytes} bytes`);
    parts.push(chunk);
  }
  return `data:${type};base64,${Buffer.concat(parts).toString("base64")}`;
}

const refusal = (message: string) => new ServiceError("invalid_request", message);
