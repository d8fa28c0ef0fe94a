// Turns what a user pastes (a model-hub URL or `owner/repo`) into a repo id, or null when it is not one.
// Pure; the hub endpoint of this process (HF_ENDPOINT) counts as a hub host alongside huggingface.co.

declare const repoIdBrand: unique symbol;
/** `owner/name` of a model repo, validated. */
export type RepoId = string & { readonly [repoIdBrand]: "RepoId" };

const SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$/;
const HUB_HOSTS = new Set(["huggingface.co", "www.huggingface.co", "hf.co"]);
/** Second path segments of hub URLs that are not model repos. */
const NON_MODEL_PREFIXES = new Set([
  "datasets",
  "spaces",
  "api",
  "docs",
  "organizations",
  "collections",
  "buckets",
]);

function validSegment(s: string): boolean {
  return SEGMENT.test(s) && !s.includes("..") && !s.includes("--") && !s.endsWith(".git");
}

/** A validated repo id from exactly two segments, or null. */
export function toRepoId(owner: string, name: string): RepoId | null {
  return validSegment(owner) && validSegment(name) ? (`${owner}/${name}` as RepoId) : null;
}

export function parseRepoId(value: string): RepoId | null {
  const parts = value.trim().split("/");
  if (parts.length !== 2) return null;
  return toRepoId(parts[0] ?? "", parts[1] ?? "");
}

export function repoOwner(id: RepoId): string {
  return id.slice(0, id.indexOf("/"));
}

export function repoName(id: RepoId): string {
  return id.slice(id.indexOf("/") + 1);
}

/**
 * Accepts `owner/repo`, `https://huggingface.co/owner/repo[/tree|blob|resolve/...]`, the same on
 * hf.co or without a scheme, and URLs on the configured hub endpoint. Datasets and spaces are not models.
 */
export function parseModelRef(input: string, hubUrl?: string): RepoId | null {
  const text = input.trim();
  if (text === "") return null;
  const direct = parseRepoId(text);
  if (direct) return direct;

  let url: URL;
  try {
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `https://${text}`);
  } catch {
    return null;
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return null;
  const hosts = new Set(HUB_HOSTS);
  if (hubUrl) {
    try {
      hosts.add(new URL(hubUrl).host.toLowerCase());
    } catch {
      // An invalid endpoint adds nothing.
    }
  }
  if (!hosts.has(url.host.toLowerCase())) return null;
  const segments = url.pathname.split("/").filter((s) => s !== "");
  const [owner, name, third] = segments;
  if (!owner || !name || NON_MODEL_PREFIXES.has(owner)) return null;
  if (
    third !== undefined &&
    !["tree", "blob", "resolve", "raw", "commits", "discussions", "files"].includes(third)
  ) {
    return null;
  }
  let decoded: [string, string];
  try {
    decoded = [decodeURIComponent(owner), decodeURIComponent(name)];
  } catch {
    return null;
  }
  return toRepoId(decoded[0], decoded[1]);
}
