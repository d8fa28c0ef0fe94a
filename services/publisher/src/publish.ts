// One publish job: find the MTP tensors of a base model, copy exactly their bytes into a new
// safetensors file by streaming Range reads to disk, then upload it to the sidecar repo.
// Invariants: a hub failure names its phase, the hub and the cause; a repo this job created is
// removed again when the upload fails, so a failed job never leaves an empty sidecar repo.
import { mkdtemp, open, rm } from "node:fs/promises";
import { join } from "node:path";
import YAML from "yaml";
import { errorMessage, withNote } from "./errors.ts";
import { describeHubFailure, inPhase } from "./hub-client.ts";
import type { HubClient } from "./hub-client.ts";
import type { RepoId } from "./model-ref.ts";
import { readConfig, readShardHeaders, readWeightIndex, shardsFor } from "./remote-safetensors.ts";
import { findMtpKeys, layerCounts, SIDECAR_FILE } from "./rules.ts";
import { planExtraction } from "./safetensors.ts";
import type { ExtractionPlan, RangeRead } from "./safetensors.ts";

export interface PublishRequest {
  readonly baseModel: RepoId;
  readonly sidecarRepo: RepoId;
}

export interface JobContext {
  /** Appends one line to the job's log (and its stream). */
  log(line: string): void;
  readonly signal: AbortSignal;
}

export interface PublishDeps {
  readonly hub: HubClient;
  /** Parent directory of the per-job scratch directory. */
  readonly workDir: string;
}

export function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(1)} ${units[u]}`;
}

/** Emits `<label>: <done>/<total> bytes (<pct>%)` at 0, at every `step` percent and at the end. */
export function progressLine(
  label: string,
  total: number,
  emit: (line: string) => void,
  step = 5,
): (done: number) => void {
  let next = 0;
  let finished = false;
  return (done) => {
    if (finished) return;
    const pct = total === 0 ? 100 : Math.floor((done / total) * 100);
    if (done !== total && pct < next) return;
    emit(`${label}: ${done}/${total} bytes (${pct}%)`);
    finished = done === total;
    next = (Math.floor(pct / step) + 1) * step;
  };
}

function sidecarCard(base: RepoId, keys: readonly string[]): string {
  const front = YAML.stringify({
    base_model: base,
    library_name: "safetensors",
    tags: ["mtp", "sidecar"],
  });
  return [
    "---",
    front.trimEnd(),
    "---",
    "",
    `# MTP sidecar for ${base}`,
    "",
    `The ${keys.length} multi-token-prediction (MTP) head tensors of [${base}](https://huggingface.co/${base}),`,
    `byte-identical, in \`${SIDECAR_FILE}\`. Published by weights-publisher.`,
    "",
  ].join("\n");
}

/** The sidecar file to write: its plan, the base model the plan reads from, and where it goes. */
interface Extraction {
  readonly plan: ExtractionPlan;
  readonly base: RepoId;
  readonly outPath: string;
}

async function writeExtraction(
  hub: HubClient,
  ctx: JobContext,
  { plan, base, outPath }: Extraction,
): Promise<void> {
  const byFile = new Map<string, RangeRead[]>();
  for (const r of plan.reads) byFile.set(r.file, [...(byFile.get(r.file) ?? []), r]);
  const fh = await open(outPath, "w", 0o600);
  try {
    await fh.write(plan.header);
    const report = progressLine("streaming to disk", plan.totalBytes, (l) => ctx.log(l));
    let written = plan.header.byteLength;
    for (const [file, reads] of byFile) {
      ctx.signal.throwIfAborted();
      const remote = await hub.open(base, file, ctx.signal);
      if (!remote) throw new Error(`${base}: shard ${file} disappeared from the hub`);
      const bytes = reads.reduce((a, r) => a + (r.end - r.start), 0);
      const tensors = reads.reduce((a, r) => a + r.tensors.length, 0);
      ctx.log(
        `downloading ${file}: ${tensors} tensors, ${formatBytes(bytes)} of ${formatBytes(remote.size)} in ${reads.length} range read(s)`,
      );
      for (const r of reads) {
        if (r.end > remote.size)
          throw new Error(`${file}: range ${r.start}-${r.end} is past its ${remote.size} bytes`);
        const reader = remote.stream(r.start, r.end).getReader();
        let got = 0;
        try {
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            ctx.signal.throwIfAborted();
            if (got + value.byteLength > r.end - r.start)
              throw new Error(`${file}: server sent more than the requested range`);
            await fh.write(value);
            got += value.byteLength;
            written += value.byteLength;
            report(written);
          }
        } finally {
          reader.releaseLock();
        }
        if (got !== r.end - r.start)
          throw new Error(`${file}: range ${r.start}-${r.end} ended after ${got} bytes`);
      }
    }
    if (written !== plan.totalBytes)
      throw new Error(`wrote ${written} bytes, planned ${plan.totalBytes}`);
  } finally {
    await fh.close();
  }
}

/** Files a freshly created hub repo may hold and still count as empty. */
const EMPTY_REPO_FILES = new Set([".gitattributes"]);
/** How long removing a repo after a failed upload may take, also when the job was cancelled. */
const CLEANUP_TIMEOUT_MS = 8_000;

/**
 * Removes a repo this job created after its upload failed, if it is still empty; the outcome as a
 * note for the job's error line. Runs on its own deadline: the job's signal may be aborted.
 */
async function removeCreatedRepo(hub: HubClient, id: RepoId): Promise<string> {
  const signal = AbortSignal.timeout(CLEANUP_TIMEOUT_MS);
  try {
    const info = await hub.modelInfo(id, signal);
    if (!info) return `the repo ${id} this job created is gone already`;
    if (info.files.some((f) => !EMPTY_REPO_FILES.has(f)))
      return `kept the repo ${id}: it is no longer empty`;
    await hub.deleteRepo(id, signal);
    return `removed the empty repo ${id} this job created`;
  } catch (err) {
    const why = describeHubFailure(hub.url, err)?.detail ?? errorMessage(err);
    return `could not remove the empty repo ${id} this job created: ${why}`;
  }
}

/**
 * Upload, last step: the sidecar file and its model card in one commit, with progress; a repo this
 * job created is removed again when the upload fails.
 */
async function uploadSidecar(
  hub: PublishDeps["hub"],
  ctx: JobContext,
  o: {
    readonly sidecar: RepoId;
    readonly base: RepoId;
    readonly plan: ReturnType<typeof planExtraction>;
    readonly outPath: string;
    readonly created: Awaited<ReturnType<PublishDeps["hub"]["ensureRepo"]>>;
  },
): Promise<void> {
  const { sidecar, base, plan, outPath, created } = o;
  const report = progressLine(`uploading ${SIDECAR_FILE}`, plan.totalBytes, (l) => ctx.log(l));
  report(0);
  let sent = 0;
  let commit: string | null;
  try {
    ({ commit } = await inPhase(hub, `uploading to ${sidecar}`, () =>
      hub.upload(
        sidecar,
        [
          { path: SIDECAR_FILE, localPath: outPath },
          { path: "README.md", text: sidecarCard(base, plan.tensors) },
        ],
        {
          title: `Add MTP sidecar of ${base}`,
          signal: ctx.signal,
          onBytes: (n) => {
            sent = Math.min(n, plan.totalBytes);
            report(sent);
          },
          onPhase: (phase) => {
            if (phase === "committing") ctx.log(`committing to ${sidecar}`);
          },
        },
      ),
    ));
  } catch (err) {
    if (created !== "created") throw err;
    throw withNote(err, await removeCreatedRepo(hub, sidecar));
  }
  if (sent < plan.totalBytes)
    ctx.log(`${SIDECAR_FILE} was already stored on the hub; upload skipped`);
  ctx.log(`committed ${commit ?? "(no commit id)"} to ${sidecar}`);
}

export async function runPublish(
  req: PublishRequest,
  ctx: JobContext,
  deps: PublishDeps,
): Promise<void> {
  const { hub } = deps;
  const base = req.baseModel;
  const sidecar = req.sidecarRepo;
  ctx.log(`finding shards of ${base}`);
  const found = await inPhase(hub, `finding shards of ${base}`, async () => {
    const info = await hub.modelInfo(base, ctx.signal);
    if (!info) throw new Error(`base model ${base} was not found on the hub`);
    const index = await readWeightIndex(hub, info.id, info.files, ctx.signal);
    if (!index) throw new Error(`${info.id} has no safetensors weights`);
    const config = await readConfig(hub, info.id, ctx.signal);
    const keys = findMtpKeys(index.weightMap.keys(), config);
    if (keys.length === 0) throw new Error(`no MTP head tensors found in ${info.id}`);
    const shardFiles = shardsFor(index, keys);
    ctx.log(
      `found ${keys.length} MTP tensors in ${shardFiles.length} of ${index.files.length} shards: ${shardFiles.join(", ")}`,
    );
    const headers = await readShardHeaders(hub, info.id, { index, files: shardFiles }, ctx.signal);
    return { info, config, keys, headers };
  });
  const { info, config, keys, headers } = found;

  const { hidden, nextn } = layerCounts(config);
  const metadata: Record<string, string> = {
    format: "pt",
    source_model: info.id,
    mtp_tensor_count: String(keys.length),
    ...(hidden !== null ? { num_hidden_layers: String(hidden) } : {}),
    ...(nextn > 0 ? { num_nextn_predict_layers: String(nextn) } : {}),
  };
  const plan = planExtraction(headers, keys, metadata);

  const scratch = await mkdtemp(join(deps.workDir, "weights-publisher-"));
  try {
    const outPath = join(scratch, SIDECAR_FILE);
    await inPhase(hub, `downloading from ${info.id}`, () =>
      writeExtraction(hub, ctx, { plan, base: info.id, outPath }),
    );
    ctx.log(
      `wrote ${SIDECAR_FILE}: ${plan.tensors.length} tensors, ${formatBytes(plan.totalBytes)}`,
    );

    ctx.log(`creating sidecar repo ${sidecar}`);
    const created = await inPhase(hub, `creating repo ${sidecar}`, () =>
      hub.ensureRepo(sidecar, ctx.signal),
    );
    ctx.log(created === "created" ? `created ${sidecar}` : `${sidecar} exists; adding a commit`);

    await uploadSidecar(hub, ctx, { sidecar, base: info.id, plan, outPath, created });
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}
