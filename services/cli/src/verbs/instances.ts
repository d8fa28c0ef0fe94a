// The verbs about instances: ic place (and wait until it serves), previews, rm, chat.
import { readFile } from "node:fs/promises";
import { INSTANCE_KINDS, InstanceKindSchema, requestedKind } from "@ic/protocol";
import type { InstanceKind } from "@ic/protocol";
import { ApiError } from "../client.ts";
import type { Client } from "../client.ts";
import { resumableStream, StreamError } from "../resumable-stream.ts";
import { intOption, UsageError } from "../args.ts";
import type { Parsed } from "../args.ts";
import { bytes, table } from "../format.ts";
import { instanceId, nodeNamer, print, waitServing } from "./common.ts";
import type { Io } from "./common.ts";

/** `--kind K` (and `--embeddings`, the older way to say `--kind embed`) as the request's kind. */
function placeKind(p: Parsed): { kind?: InstanceKind } {
  const asked = p.values["kind"] as string | undefined;
  const parsed = InstanceKindSchema.safeParse(asked ?? "generate");
  if (!parsed.success)
    throw new UsageError(`--kind must be one of ${INSTANCE_KINDS.join(", ")}, not "${asked}"`);
  const kind = requestedKind(
    asked === undefined ? undefined : parsed.data,
    p.values["embeddings"] === true,
  );
  if (kind === null) throw new UsageError(`--embeddings asks for --kind embed, not "${asked}"`);
  return kind === "generate" ? {} : { kind };
}

export async function verbPlace(p: Parsed, c: Client, io: Io): Promise<number> {
  const sharding = (p.values["sharding"] as string | undefined) ?? "Pipeline";
  if (sharding !== "Pipeline" && sharding !== "Tensor")
    throw new UsageError(`--sharding must be Pipeline or Tensor, not "${sharding}"`);
  const body = {
    model_id: p.positionals[0],
    min_nodes: intOption("min-nodes", p.values["min-nodes"], { min: 1, max: 1024, fallback: 1 }),
    sharding,
    excluded_nodes: ((p.values["exclude"] as string | undefined) ?? "").split(",").filter(Boolean),
    ...placeKind(p),
    replicas: intOption("replicas", p.values["replicas"], { min: 1, max: 16, fallback: 1 }),
  };
  type Placed = {
    instance_id: string;
    assignments: { node_id: string; rank: number; layers: number }[];
  };
  const r = await c.json<{ instance: Placed; instances?: Placed[] }>(
    "POST",
    "/place_instance",
    body,
    60_000,
  );
  const named = p.json ? String : await nodeNamer(c);
  const all = r.instances ?? [r.instance];
  print(io, p, r, () =>
    all
      .map(
        (i) =>
          `placed ${i.instance_id}: ${i.assignments.map((a) => `rank ${a.rank} on ${named(a.node_id)}, ${a.layers} layers`).join("; ")}`,
      )
      .join("\n"),
  );
  if (p.values["wait"]) for (const i of all) await waitServing(c, i.instance_id, io, p);
  return 0;
}

export async function verbPreviews(p: Parsed, c: Client, io: Io): Promise<number> {
  const q = new URLSearchParams({ model_id: p.positionals[0]! });
  if (p.values["exclude"]) q.set("excluded_node_ids", p.values["exclude"] as string);
  const r = await c.get<{
    previews: {
      sharding: string;
      nodes: number;
      ok: boolean;
      assignments?: { node_id: string; rank: number; required_bytes: number }[];
      error?: { code: string; message: string };
    }[];
  }>(`/instance/previews?${q.toString()}`);
  const named = p.json ? String : await nodeNamer(c);
  print(io, p, r, () =>
    table(
      ["SHARDING", "NODES", "RESULT"],
      r.previews.map((v) => [
        v.sharding,
        String(v.nodes),
        v.ok
          ? `ok: ${(v.assignments ?? []).map((a) => `${named(a.node_id)} ${bytes(a.required_bytes)}`).join(", ")}`
          : `${v.error?.code}: ${v.error?.message}`,
      ]),
    ),
  );
  return 0;
}

export async function verbRm(p: Parsed, c: Client, io: Io): Promise<number> {
  const id = await instanceId(c, p.positionals[0]!);
  const r = await c.json<{ instance_id: string }>("DELETE", `/instance/${encodeURIComponent(id)}`);
  print(io, p, r, () => `deleted ${r.instance_id}`);
  return 0;
}

const IMAGE_TYPES: Record<string, string> = {
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  webp: "image/webp",
  bmp: "image/bmp",
};

/** The message's content: the text alone, or the text and the image (a file inline, or its URL). */
async function withImage(text: string, image: unknown): Promise<unknown> {
  if (typeof image !== "string") return text;
  let url = image;
  if (!/^(https?:|data:)/.test(image)) {
    const type = IMAGE_TYPES[image.split(".").pop()?.toLowerCase() ?? ""];
    if (!type)
      throw new UsageError(
        `--image must be a .png, .jpg, .gif, .webp or .bmp file, or an http(s) URL: ${image}`,
      );
    const bytes = await readFile(image).catch((e: Error) => {
      throw new UsageError(`--image ${image}: ${e.message}`);
    });
    url = `data:${type};base64,${bytes.toString("base64")}`;
  }
  return [
    { type: "text", text },
    { type: "image_url", image_url: { url } },
  ];
}

export async function verbChat(p: Parsed, c: Client, io: Io): Promise<number> {
  const [model, ...words] = p.positionals;
  const content = words.join(" ") || "Hello!";
  const maxTokens = intOption("max-tokens", p.values["max-tokens"], {
    min: 1,
    max: 1_000_000,
    fallback: 256,
  });
  const t = p.values["temperature"] as string | undefined;
  const temperature = t === undefined ? undefined : Number(t);
  if (temperature !== undefined && !(temperature >= 0 && temperature <= 2))
    throw new UsageError(`--temperature must be a number from 0 to 2, not "${t}"`);
  // The answer survives its node: a broken connection reads on through the cluster's other nodes.
  const others = await c
    .get<{ node_identities: { api_url?: string }[] }>("/state")
    .then((s) => s.node_identities.flatMap((n) => (n.api_url ? [n.api_url] : [])))
    .catch(() => [] as string[]);
  const nodes = [c.url, ...others.filter((u) => u.replace(/\/+$/, "") !== c.url)];
  let text = "";
  try {
    for await (const e of resumableStream({
      nodes,
      path: "/v1/chat/completions",
      headers: c.authHeaders,
      body: {
        model,
        messages: [{ role: "user", content: await withImage(content, p.values["image"]) }],
        max_tokens: maxTokens,
        ...(temperature === undefined ? {} : { temperature }),
      },
    })) {
      if (e.data === "[DONE]") continue;
      const j = JSON.parse(e.data) as {
        error?: { code: string; message: string };
        choices?: { delta?: { content?: string } }[];
      };
      if (j.error) throw new ApiError(500, j.error.code, j.error.message);
      const piece = j.choices?.[0]?.delta?.content ?? "";
      text += piece;
      if (!p.json) io.write(piece);
    }
  } catch (e) {
    if (!(e instanceof StreamError)) throw e;
    const err = (JSON.parse(e.body || "{}") as { error?: { code?: string; message?: string } })
      .error;
    throw new ApiError(e.status, err?.code ?? `http_${e.status}`, err?.message ?? e.message);
  }
  if (p.json) io.out(JSON.stringify({ model, content: text }, null, 2));
  else io.write("\n");
  return 0;
}
