// nodeHealth entries about the store host's own models: hashing in the background (info), files that
// differ from their manifest and registrations the master refused (warn). Pure, so tested by tables.
import { GiB, type HealthEntry, type ModelId } from "@ic/protocol";
import type { HashJobProgress } from "./hash-pool.ts";
import { MANIFEST_FILE } from "./manifests.ts";
import type { ChangedModel } from "./store-models.ts";
import type { LooseEntry } from "./store-watch.ts";

/** Queued hashes named one by one; the rest are counted (the heartbeat stays bounded). */
const QUEUED_NAMED = 5;

/** One info entry per running hash (bytes hashed of total), one for the queue. */
export function hashingHealth(jobs: readonly HashJobProgress[]): HealthEntry[] {
  const out: HealthEntry[] = jobs
    .filter((j) => j.state !== "queued")
    .map((j) => ({
      code: "store_hashing",
      severity: "info",
      model_id: j.model_id,
      message:
        j.kind === "register"
          ? `hashing ${j.model_id} to register it: ${progressText(j)}${pausedText(j)}`
          : `adding piece hashes to the manifest of ${j.model_id}: ${progressText(j)}${pausedText(j)}; its files are served whole until then`,
      remediation:
        j.kind === "register"
          ? "none needed: it is registered when its hash completes"
          : "none needed: it is served already",
    }));
  const queued = jobs.filter((j) => j.state === "queued");
  if (queued.length > 0) {
    const named = queued.slice(0, QUEUED_NAMED).map((j) => `${j.model_id} (${gib(j.total_bytes)})`);
    const more = queued.length - named.length;
    out.push({
      code: "store_hashing",
      severity: "info",
      message: `waiting to be hashed: ${named.join(", ")}${more > 0 ? ` and ${more} more` : ""}`,
      remediation:
        "none needed: the store host hashes one model at a time, the one with the fewest bytes left first",
    });
  }
  return out;
}

/** One warning per model whose files differ from its manifest, naming the file and what differs. */
export function changedModelHealth(changed: readonly ChangedModel[]): HealthEntry[] {
  return changed.map((c) => {
    const first = c.differences[0];
    const others = c.differences.length - 1;
    const what = first ? `${first.file}: ${first.problem}` : "its files differ from its manifest";
    return {
      code: "store_model_changed",
      severity: "warn",
      model_id: c.model_id,
      message: `${c.model_id} is not served nor registered: ${what}${others > 0 ? ` (and ${others} more files differ)` : ""}`,
      remediation: `put back the files its manifest lists, or delete ${c.dir}/${MANIFEST_FILE} to register the files as they are now`,
    };
  });
}

/** One warning per model the store host could not register, with the master's words. */
export function refusedModelHealth(refused: ReadonlyMap<ModelId, string>): HealthEntry[] {
  return [...refused].map(([id, words]) => ({
    code: "store_model_refused",
    severity: "warn",
    model_id: id,
    message: `${id} is in the store but not registered in the cluster: ${words}`,
    remediation: `fix what the message names in ${id}'s files (or its model.json); the store host asks again when they change, and every 30 s`,
  }));
}

function progressText(j: HashJobProgress): string {
  const pct = j.total_bytes > 0 ? Math.floor((100 * j.done_bytes) / j.total_bytes) : 100;
  return `${gib(j.done_bytes)} of ${gib(j.total_bytes)} (${pct}%)`;
}

function gib(bytes: number): string {
  return `${(bytes / GiB).toFixed(2)} GiB`;
}

function pausedText(j: HashJobProgress): string {
  return j.state === "paused" ? " (paused while smaller models are hashed)" : "";
}

/** nodeHealth warnings for what lies unserved at the top of store_path (a file, a misnamed folder). Pure. */
export function looseEntryHealth(loose: readonly LooseEntry[]): HealthEntry[] {
  return loose.map((e) => ({
    code: "store_loose_file",
    severity: "warn",
    message: `${e.name} in store_path is not served`,
    remediation: e.hint,
  }));
}

/**
 * nodeHealth warnings of the store host for models whose directory was removed from store_path by
 * hand while something uses them (the master's refusal says what). Pure.
 */
export function missingModelHealth(missing: ReadonlyMap<ModelId, string>): HealthEntry[] {
  return [...missing].map(([id, refusal]) => ({
    code: "store_model_missing",
    severity: "warn",
    message: `the directory of ${id} was removed from store_path while it is in use (${refusal}); it is no longer served, and it stays registered until nothing uses it`,
    remediation: `put the model's directory back into store_path, or delete what uses ${id} (DELETE /instance/{id}); it then leaves the registry`,
  }));
}
