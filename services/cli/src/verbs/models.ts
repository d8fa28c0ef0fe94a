// The verbs about models and their files: ic models, pull, import, pulls, storage, purge.
import type { Client } from "../client.ts";
import { ApiError } from "../client.ts";
import { UsageError } from "../args.ts";
import type { Parsed } from "../args.ts";
import { bytes, progressBar, purgeText, table } from "../format.ts";
import type { PurgeAnswer } from "../format.ts";
import { memberOf, print } from "./common.ts";
import type { ClusterStorage } from "@ic/protocol";
import type { Io, Pull, StateDoc } from "./common.ts";

/** The files `ic import` sends: the file itself, or a folder's files (hidden ones left out). */
async function importFiles(target: string): Promise<{ abs: string; rel: string; bytes: number }[]> {
  const { readdir, stat } = await import("node:fs/promises");
  const { basename, join, relative } = await import("node:path");
  let st;
  try {
    st = await stat(target);
  } catch {
    throw new UsageError(`${target}: no such file or folder`);
  }
  if (st.isFile()) return [{ abs: target, rel: basename(target), bytes: st.size }];
  const out: { abs: string; rel: string; bytes: number }[] = [];
  const walk = async (dir: string): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true })) {
      if (e.name.startsWith(".")) continue;
      const abs = join(dir, e.name);
      if (e.isDirectory()) await walk(abs);
      else if (e.isFile())
        out.push({ abs, rel: relative(target, abs), bytes: (await stat(abs)).size });
    }
  };
  await walk(target);
  if (!out.some((f) => f.rel.endsWith(".gguf")))
    throw new UsageError(`${target} holds no .gguf file: nothing the engine could load`);
  return out.sort((a, b) => (a.rel < b.rel ? -1 : 1));
}

export async function verbModels(p: Parsed, c: Client, io: Io): Promise<number> {
  const [s, ready] = await Promise.all([
    c.get<StateDoc>("/state"),
    c.get<{ data: { id: string }[] }>("/v1/models"),
  ]);
  const isReady = new Set(ready.data.map((m) => m.id));
  const rows = s.models.map((m) => ({ ...m, ready: isReady.has(m.model_id) }));
  print(io, p, rows, () =>
    rows.length
      ? table(
          ["MODEL", "SIZE", "LAYERS", "READY"],
          rows.map((m) => [m.model_id, bytes(m.bytes), String(m.layers), m.ready ? "yes" : "no"]),
        )
      : "no models registered (ic pull <org/name>, or copy one into store_path)",
  );
  return 0;
}

export async function verbPull(p: Parsed, c: Client, io: Io): Promise<number> {
  // org/repo[:QUANT][@revision]; the node validates each part and says what is wrong.
  const ref = /^([^:@]*)(?::([^@]*))?(?:@(.*))?$/.exec(p.positionals[0]!)!;
  const model = ref[1]!;
  const { pull } = await c.json<{ pull: Pull }>("POST", "/store/pulls", {
    model_id: model,
    ...(ref[2] !== undefined ? { quant: ref[2] } : {}),
    ...(ref[3] !== undefined ? { revision: ref[3] } : {}),
  });
  if (p.values["detach"]) {
    print(io, p, pull, () => `pull of ${model}: ${pull.state}`);
    return 0;
  }
  let cancelled = false;
  const onInt = () => {
    cancelled = true;
    void c.json("DELETE", `/store/pulls/${model}`).catch(() => undefined);
  };
  process.once("SIGINT", onInt);
  try {
    let last = "";
    for (;;) {
      const { pulls } = await c.get<{ pulls: Pull[] }>("/store/pulls");
      const now = pulls.find((x) => x.model_id === model);
      if (!now) throw new ApiError(404, "not_found", `the store host has no pull of ${model}`);
      const what = now.quant ? `${model}:${now.quant}` : model;
      const line = `${what} ${now.state.padEnd(9)} ${progressBar(now.bytes_done, now.bytes_total)}`;
      if (p.json) {
        if (now.state !== "running" && now.state !== "queued") io.out(JSON.stringify(now, null, 2));
      } else if (io.tty) io.err(`\r${line}`);
      else if (line !== last) io.out(line);
      last = line;
      if (now.state === "done") {
        if (io.tty && !p.json) io.err("\n");
        if (!p.json && now.served_file)
          io.out(`pulled ${what}: the engine loads ${now.served_file} (ic place ${model})`);
        return 0;
      }
      if (now.state === "failed" || now.state === "cancelled") {
        if (io.tty && !p.json) io.err("\n");
        if (now.state === "failed")
          throw new ApiError(
            500,
            now.error?.code ?? "failed",
            now.error?.message ?? "the pull failed",
          );
        throw new ApiError(
          499,
          "cancelled",
          cancelled ? "cancelled; ic pull again resumes it" : "cancelled on the store host",
        );
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  } finally {
    process.off("SIGINT", onInt);
  }
}

export async function verbImport(p: Parsed, c: Client, io: Io): Promise<number> {
  const id = p.values["as"] as string | undefined;
  if (!id || !/^[^/\s]+\/[^/\s]+$/.test(id))
    throw new UsageError("--as org/name is required: the model id it is served as");
  const files = await importFiles(p.positionals[0]!);
  const where = await c.get<{ name: string; api_url: string }>("/store/host");
  // Files go straight to the store host; the node asked only said where it is.
  const store = c.at(where.api_url);
  const total = files.reduce((s, f) => s + f.bytes, 0);
  try {
    for (const f of files) {
      if (!p.json) io.out(`sending ${f.rel} (${bytes(f.bytes)}) to ${where.name}`);
      await store.upload(
        `/store/uploads/${id}/files/${f.rel.split("/").map(encodeURIComponent).join("/")}`,
        f.abs,
        f.bytes,
      );
    }
    await store.json("POST", `/store/uploads/${id}/commit`);
  } catch (e) {
    await store.json("DELETE", `/store/uploads/${id}`).catch(() => undefined);
    throw e;
  }
  // The store watch registers it once its files have settled (a few seconds).
  const deadline = Date.now() + 60_000;
  let registered = false;
  while (!registered && Date.now() < deadline) {
    const s = await c.get<StateDoc>("/state");
    registered = s.models.some((m) => m.model_id === id);
    if (!registered) await new Promise((r) => setTimeout(r, 500));
  }
  if (!registered)
    throw new ApiError(
      504,
      "not_registered",
      `${id} is in the store but not registered after 60 s: see the store host's log (ic logs)`,
    );
  const out = { model_id: id, files: files.length, bytes: total, store_host: where.name };
  if (p.values["place"]) {
    const placed = await c.json<{ instance: { instance_id: string } }>("POST", "/place_instance", {
      model_id: id,
      min_nodes: 1,
      excluded_nodes: [],
    });
    print(
      io,
      p,
      { ...out, instance_id: placed.instance.instance_id },
      () =>
        `imported ${id} (${files.length} file(s), ${bytes(total)}) and placed ${placed.instance.instance_id}`,
    );
    return 0;
  }
  print(
    io,
    p,
    out,
    () => `imported ${id} (${files.length} file(s), ${bytes(total)}): ic place ${id}`,
  );
  return 0;
}

export async function verbPulls(p: Parsed, c: Client, io: Io): Promise<number> {
  const dismiss = p.values["dismiss"] as string | undefined;
  if (dismiss !== undefined) {
    const r = await c.json<{ pull: Pull; dismissed: boolean }>("DELETE", `/store/pulls/${dismiss}`);
    print(io, p, r, () =>
      r.dismissed
        ? `dismissed the ${r.pull.state} pull of ${dismiss}`
        : `the pull of ${dismiss} was ${r.pull.state === "cancelled" ? "live: cancelled it" : r.pull.state}`,
    );
    return 0;
  }
  const { pulls } = await c.get<{ pulls: Pull[] }>("/store/pulls");
  print(io, p, pulls, () =>
    pulls.length
      ? table(
          ["MODEL", "QUANT", "STATE", "PROGRESS"],
          pulls.map((x) => [
            x.model_id,
            x.quant ?? "-",
            x.state,
            x.error ? x.error.message : progressBar(x.bytes_done, x.bytes_total),
          ]),
        )
      : "no pulls",
  );
  return 0;
}

export async function verbStorage(p: Parsed, c: Client, io: Io): Promise<number> {
  // The node asks its live peers itself (GET /store/storage/cluster): their API addresses need
  // not be reachable from here.
  const s = await c.get<ClusterStorage>("/store/storage/cluster", 10_000);
  const only = p.values["node"] ? (await memberOf(c, p.values["node"] as string)).name : undefined;
  const reports = [
    ...s.nodes.map((n) => ({ node: n.name, ...n.report })),
    ...s.unreachable.map((u) => ({ node: u.node, error: u.error })),
  ].filter((r) => only === undefined || r.node === only);
  print(io, p, reports, () =>
    table(
      ["NODE", "STAGED", "MODELS", "EVENT LOG", "VOLUME FREE"],
      reports.map((r) =>
        "error" in r
          ? [r.node, "-", "-", "-", String(r.error)]
          : [
              r.node,
              bytes(r.staged_bytes),
              String(r.staged_models.length),
              bytes(r.event_log_bytes),
              `${bytes(r.models_volume.free_bytes)} / ${bytes(r.models_volume.total_bytes)}`,
            ],
      ),
    ),
  );
  return 0;
}

export async function verbPurge(p: Parsed, c: Client, io: Io): Promise<number> {
  const model = p.values["model"] as string | undefined;
  const r = await c.json<PurgeAnswer & { ok: boolean }>(
    "POST",
    "/store/purge-staging",
    model ? { modelId: model } : {},
  );
  print(io, p, r, () => purgeText(r, model));
  return r.ok ? 0 : 1;
}
