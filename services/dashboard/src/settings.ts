// The staging settings editor behind the dashboard (GET/PUT /admin/settings). An edit is applied to
// this node's YAML config file with the yaml Document API (comments, key order and every other key
// kept), the candidate file is loaded exactly as the next start would load it (the config schema,
// token and secret files included), then renamed over the file and the new staging section applied.
import { randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { access, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { isMap, parseDocument } from "yaml";
import { z } from "zod";
import { ConfigError, StagingSchema, loadConfig, stagingFor } from "@ic/config";
import type { Config, StagingConfig } from "@ic/config";
import { GiB, ServiceError } from "@ic/protocol";
import { Serial, stagingSettings } from "@ic/staging";
import type { LiveStagingSettings, StagingSettings } from "@ic/staging";

/** The keys the editor changes: the staging section of the config schema. */
export const STAGING_KEYS = Object.keys(StagingSchema.shape) as (keyof StagingConfig)[];

/**
 * One section's edit: a key's new value, or null to remove the key from the file (the base section
 * then falls back to the default, a node override to the base section). Values are checked by the
 * config schema when the candidate file loads, so the error names the key as the loader does.
 */
const SectionEditSchema = z
  .object(
    Object.fromEntries(STAGING_KEYS.map((k) => [k, z.unknown().optional()])) as Record<
      keyof StagingConfig,
      z.ZodOptional<z.ZodUnknown>
    >,
  )
  .strict();

/** PUT /admin/settings body. */
export const SettingsEditSchema = z
  .object({
    /** `model_store.staging`: the base section every node of this file uses. */
    staging: SectionEditSchema.optional(),
    /** `node_overrides.<this node>.model_store.staging`: this node only. */
    node_override: SectionEditSchema.optional(),
  })
  .strict()
  .refine((e) => e.staging !== undefined || e.node_override !== undefined, {
    message: "name staging or node_override",
  });
export type SettingsEdit = z.infer<typeof SettingsEditSchema>;

const BASE_PATH = ["model_store", "staging"];
const overridePath = (node: string): string[] => ["node_overrides", node, "model_store", "staging"];

/**
 * The config text with `edit` applied; comments and everything else stay as they were. A path left
 * empty by removals (this node's override) is removed too, so the file does not fill with `{}`.
 */
export function editStagingYaml(text: string, nodeName: string, edit: SettingsEdit): string {
  const doc = parseDocument(text);
  if (doc.errors.length > 0)
    throw new ServiceError(
      "conflict",
      `the config file is not valid YAML: ${doc.errors[0]!.message}`,
    );
  if (doc.contents !== null && !isMap(doc.contents))
    throw new ServiceError("conflict", "the config file's top level is not a mapping");
  // Each section with the depth its emptied maps are pruned to: never the base section itself, and
  // an override down to `node_overrides` when the node's last override key goes.
  const sections: [string[], Record<string, unknown> | undefined, number][] = [
    [BASE_PATH, edit.staging, BASE_PATH.length],
    [overridePath(nodeName), edit.node_override, 0],
  ];
  for (const [path, values, keep] of sections) {
    for (const [key, value] of Object.entries(values ?? {})) {
      if (value === undefined) continue;
      // deleteIn throws on a path through a missing collection: remove only what is there.
      if (value === null) {
        if (doc.hasIn([...path, key])) doc.deleteIn([...path, key]);
      } else doc.setIn([...path, key], value);
    }
    // Remove the maps a removal emptied, innermost first.
    for (let depth = path.length; depth > keep; depth--) {
      const at = path.slice(0, depth);
      const node: unknown = doc.getIn(at, true);
      if (isMap(node) && node.items.length === 0) doc.deleteIn(at);
      else break;
    }
  }
  return doc.toString();
}

/** The staging section in the editor's units (GiB, as in the file). */
const StagingValuesSchema = z.object({
  cleanup_on_deactivate: z.boolean(),
  staging_keep_recent_gb: z.number(),
  headroom_gb: z.number(),
});
export type StagingValues = z.infer<typeof StagingValuesSchema>;

/** GET /admin/settings and the answer of PUT. */
export const SettingsViewSchema = z.object({
  node: z.string(),
  /** The config file this node started from; null when it started without one. */
  file: z.string().nullable(),
  /** Whether PUT can write the file (this process may replace it). */
  writable: z.boolean(),
  /** Why not, when it cannot. */
  read_only_reason: z.string().nullable(),
  /** `model_store.staging` as the file sets it, defaults filled in. */
  staging: StagingValuesSchema,
  /** This node's override as the file sets it (only the keys it names). */
  node_override: StagingValuesSchema.partial(),
  /** What the file gives this node (base plus override). */
  effective: StagingValuesSchema,
  /** What the node applies now; differs from `effective` when the file was edited by hand. */
  applied: StagingValuesSchema,
});
export type SettingsView = z.infer<typeof SettingsViewSchema>;

const values = (s: StagingSettings): StagingValues => ({
  cleanup_on_deactivate: s.cleanupOnDeactivate,
  staging_keep_recent_gb: s.keepRecentBytes / GiB,
  headroom_gb: s.headroomBytes / GiB,
});

/** ConfigError "key: message" lines as the API's validation issues. */
function configIssues(e: ConfigError): { path: string; message: string }[] {
  return e.issues.map((line) => {
    const at = line.indexOf(": ");
    return at < 0
      ? { path: "", message: line }
      : { path: line.slice(0, at), message: line.slice(at + 2) };
  });
}

/** A write or rename the filesystem refused, as the API's conflict. */
function cannotReplace(file: string, e: unknown): ServiceError {
  const code = (e as NodeJS.ErrnoException).code ?? "error";
  return new ServiceError(
    "conflict",
    `cannot replace ${file} (${code}): the editor writes a file beside it and renames it over; ` +
      "mount or place the config in a directory this node's user can write (docs/operations.md, Dashboard)",
    { cause: e },
  );
}

export interface SettingsFileOptions {
  /** The config file this node was started with (expanded), if any. */
  readonly file: string | undefined;
  /** This node's name (its override's key). */
  readonly nodeName: string;
  /** The settings in force, replaced on a successful edit. */
  readonly live: LiveStagingSettings;
  /** Environment for loading the candidate (as the node's own load). */
  readonly env?: NodeJS.ProcessEnv;
}

export class SettingsFile {
  private readonly serial = new Serial();
  constructor(private readonly o: SettingsFileOptions) {}

  private load(file: string): Config {
    return loadConfig({ file, env: this.o.env ?? process.env });
  }

  async view(): Promise<SettingsView> {
    const applied = values(this.o.live.current);
    const file = this.o.file;
    if (file === undefined) {
      return {
        node: this.o.nodeName,
        file: null,
        writable: false,
        read_only_reason:
          "this node was started without a config file (--config or SERVICE_CONFIG)",
        staging: applied,
        node_override: {},
        effective: applied,
        applied,
      };
    }
    let cfg: Config;
    try {
      cfg = this.load(file);
    } catch (e) {
      throw new ServiceError(
        "conflict",
        `the config file ${file} does not load: ${e instanceof Error ? e.message : String(e)}`,
      );
    }
    const override = cfg.node_overrides[this.o.nodeName]?.model_store?.staging ?? {};
    const reason = await this.readOnlyReason(file);
    return {
      node: this.o.nodeName,
      file,
      writable: reason === null,
      read_only_reason: reason,
      staging: { ...cfg.model_store.staging },
      node_override: Object.fromEntries(
        Object.entries(override).filter(([, v]) => v !== undefined),
      ) as Partial<StagingValues>,
      effective: values(stagingSettings(stagingFor(cfg, this.o.nodeName))),
      applied,
    };
  }

  /** Replacing the file needs write access to it and to its directory (the temporary file). */
  private async readOnlyReason(file: string): Promise<string | null> {
    try {
      await access(file, constants.W_OK);
      await access(dirname(file), constants.W_OK);
      return null;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? "error";
      return `this node's user cannot replace ${file} (${code}); make the file and its directory writable by it to edit settings here`;
    }
  }

  /** Applies an edit: validated, written atomically, applied live; serialized with other edits. */
  update(edit: SettingsEdit): Promise<SettingsView> {
    return this.serial.run(async () => {
      const file = this.o.file;
      if (file === undefined)
        throw new ServiceError(
          "conflict",
          "this node was started without a config file (--config or SERVICE_CONFIG): nothing to write settings to",
        );
      const reason = await this.readOnlyReason(file);
      if (reason !== null) throw new ServiceError("conflict", reason);
      const [text, st] = await Promise.all([readFile(file, "utf8"), stat(file)]);
      const next = editStagingYaml(text, this.o.nodeName, edit);
      const tmp = join(dirname(file), `.${basename(file)}.${randomBytes(6).toString("hex")}.tmp`);
      try {
        await writeFile(tmp, next, { mode: st.mode & 0o777, flag: "wx" }).catch((e: unknown) => {
          throw cannotReplace(file, e);
        });
        let cfg: Config;
        try {
          cfg = this.load(tmp);
        } catch (e) {
          if (!(e instanceof ConfigError)) throw e;
          const issues = configIssues(e);
          const first = issues[0];
          throw new ServiceError(
            "invalid_request",
            `settings: ${first ? `${first.path}: ${first.message}` : e.message}`,
            { details: { issues } },
          );
        }
        // A file bind-mounted on its own (a container) cannot be renamed over: EBUSY.
        await rename(tmp, file).catch((e: unknown) => {
          throw cannotReplace(file, e);
        });
        this.o.live.replace(stagingSettings(stagingFor(cfg, this.o.nodeName)));
      } finally {
        await rm(tmp, { force: true });
      }
      return this.view();
    });
  }
}
