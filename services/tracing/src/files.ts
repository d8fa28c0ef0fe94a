// Trace files on disk: one `<createdAt ms>_<task id>.json` per trace under tracing.dir (written by
// writer.ts to a temporary name and renamed, so a reader never sees half a file); listing, reading
// and removal. Task ids are checked against their charset before they become a path, and every path
// is checked to stay inside the dir.
import { mkdir, readdir, readFile, rm } from "node:fs/promises";
import { resolve, sep } from "node:path";
import { ChromeTraceSchema } from "./trace.ts";
import type { ChromeTrace } from "./trace.ts";

/** Master-created task ids are `t-<uuid>`; anything outside this charset is refused. */
const TASK_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

export function isValidTaskId(id: string): boolean {
  return TASK_ID.test(id);
}

const FILE = /^(\d{1,16})_([A-Za-z0-9][A-Za-z0-9_-]{0,127})\.json$/;
const TMP = /^\.(\d{1,16}_[A-Za-z0-9][A-Za-z0-9_-]{0,127}\.json)\.tmp$/;

export function traceFileName(taskId: string, createdAtMs: number): string {
  if (!isValidTaskId(taskId)) throw new Error(`not a task id: ${JSON.stringify(taskId)}`);
  return `${Math.floor(createdAtMs)}_${taskId}.json`;
}

/** The creation time and task id a trace file's name carries; undefined for any other name. */
export function parseTraceFileName(
  name: string,
): { createdAtMs: number; taskId: string } | undefined {
  const m = FILE.exec(name);
  return m ? { createdAtMs: Number(m[1]), taskId: m[2]! } : undefined;
}

/** A temporary file left by an interrupted write: the creation time of the trace it was for. */
export function parseTempFileName(name: string): { createdAtMs: number } | undefined {
  const m = TMP.exec(name);
  const inner = m ? parseTraceFileName(m[1]!) : undefined;
  return inner ? { createdAtMs: inner.createdAtMs } : undefined;
}

const CACHE_MAX = 100_000;

export interface TraceEntry {
  readonly taskId: string;
  readonly createdAt: string;
  readonly modelId: string;
}

export class TraceFiles {
  readonly dir: string;
  /** modelId by file name (list reads each file once) and file name by task id (stats skip the scan). */
  private readonly models = new Map<string, string>();
  private readonly byTask = new Map<string, string>();

  constructor(dir: string) {
    this.dir = resolve(dir);
  }

  /** `name` inside the dir; throws for anything that would land elsewhere. */
  pathOf(name: string): string {
    const p = resolve(this.dir, name);
    if (!p.startsWith(this.dir + sep) || p.slice(this.dir.length + 1).includes(sep))
      throw new Error(`trace file ${JSON.stringify(name)} is outside ${this.dir}`);
    return p;
  }

  async ensureDir(): Promise<void> {
    await mkdir(this.dir, { recursive: true });
  }

  /** Records the model of a file the writer thread wrote, so list need not read it. */
  remember(name: string, modelId: string): void {
    const p = parseTraceFileName(name);
    if (!p) return;
    this.bound();
    this.models.set(name, modelId);
    this.byTask.set(p.taskId, name);
  }

  /** The caches only save reads: past CACHE_MAX entries they start over. */
  private bound(): void {
    if (this.models.size >= CACHE_MAX) this.models.clear();
    if (this.byTask.size >= CACHE_MAX) this.byTask.clear();
  }

  /** Every file name in the dir ([] when it does not exist yet). */
  async names(): Promise<string[]> {
    try {
      return await readdir(this.dir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw e;
    }
  }

  /** Trace files, newest first (by creation time, then task id). */
  async files(): Promise<{ name: string; createdAtMs: number; taskId: string }[]> {
    const out: { name: string; createdAtMs: number; taskId: string }[] = [];
    for (const name of await this.names()) {
      const p = parseTraceFileName(name);
      if (p) out.push({ name, ...p });
    }
    return out.sort((a, b) => b.createdAtMs - a.createdAtMs || (a.taskId < b.taskId ? -1 : 1));
  }

  /** The newest `limit` traces; a file that cannot be read or parsed is skipped. */
  async list(limit: number): Promise<TraceEntry[]> {
    const files = await this.files();
    const out: TraceEntry[] = [];
    for (let i = 0; i < files.length && out.length < limit;) {
      const batch = files.slice(i, i + Math.min(64, limit - out.length));
      i += batch.length;
      const entries = await Promise.all(batch.map((f) => this.entry(f)));
      for (const e of entries) if (e) out.push(e);
    }
    return out;
  }

  private async entry(f: {
    name: string;
    createdAtMs: number;
    taskId: string;
  }): Promise<TraceEntry | undefined> {
    let modelId = this.models.get(f.name);
    if (modelId === undefined) {
      const t = await this.readName(f.name);
      if (!t) return undefined;
      modelId = t.otherData.modelId;
      this.remember(f.name, modelId);
    }
    return { taskId: f.taskId, createdAt: new Date(f.createdAtMs).toISOString(), modelId };
  }

  /** The trace of `taskId`, or undefined when no file holds it (throws on an invalid id). */
  async read(taskId: string): Promise<ChromeTrace | undefined> {
    if (!isValidTaskId(taskId)) throw new Error(`not a task id: ${JSON.stringify(taskId)}`);
    const known = this.byTask.get(taskId);
    if (known) {
      const t = await this.readName(known);
      if (t) return t;
      this.byTask.delete(taskId);
    }
    const f = (await this.files()).find((x) => x.taskId === taskId);
    return f ? this.readName(f.name) : undefined;
  }

  private async readName(name: string): Promise<ChromeTrace | undefined> {
    let text: string;
    try {
      text = await readFile(this.pathOf(name), "utf8");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw e;
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      return undefined;
    }
    const parsed = ChromeTraceSchema.safeParse(json);
    return parsed.success ? (parsed.data as unknown as ChromeTrace) : undefined;
  }

  async remove(name: string): Promise<void> {
    await rm(this.pathOf(name), { force: true });
    this.models.delete(name);
    const p = parseTraceFileName(name);
    if (p && this.byTask.get(p.taskId) === name) this.byTask.delete(p.taskId);
  }
}
