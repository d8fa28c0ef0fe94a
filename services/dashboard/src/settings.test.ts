// The settings editor: YAML edits keep comments and other keys, removals prune an emptied override,
// the candidate is validated by the config loader (errors name the key, nothing is written), and a
// good edit is written atomically and applied to the live settings.
import { readFileSync, readdirSync } from "node:fs";
import { parse } from "yaml";
import { describe, expect, it } from "vitest";
import { GiB, ServiceError } from "@ic/protocol";
import { LiveStagingSettings } from "@ic/staging";
import { SettingsEditSchema, SettingsFile, editStagingYaml } from "./settings.ts";
import { settingsFixture } from "./testing.ts";

const COMMENTED = `# cluster node config
node:
  name: node-1 # this machine
  host: 127.0.0.1
model_store:
  # how staged copies are kept
  staging:
    cleanup_on_deactivate: true
    staging_keep_recent_gb: 40 # grace budget
`;

describe("editStagingYaml", () => {
  it.each([
    {
      name: "sets a base key and keeps every comment",
      text: COMMENTED,
      edit: { staging: { staging_keep_recent_gb: 5 } },
      has: [
        "# cluster node config",
        "name: node-1 # this machine",
        "# how staged copies are kept",
        "staging_keep_recent_gb: 5 # grace budget",
      ],
      doc: { model_store: { staging: { cleanup_on_deactivate: true, staging_keep_recent_gb: 5 } } },
    },
    {
      name: "adds a key the file did not name",
      text: COMMENTED,
      edit: { staging: { headroom_gb: 2.5 } },
      has: ["headroom_gb: 2.5"],
      doc: { model_store: { staging: { headroom_gb: 2.5, staging_keep_recent_gb: 40 } } },
    },
    {
      name: "creates this node's override",
      text: COMMENTED,
      edit: { node_override: { cleanup_on_deactivate: false } },
      has: ["# cluster node config"],
      doc: {
        node_overrides: {
          "node-1": { model_store: { staging: { cleanup_on_deactivate: false } } },
        },
      },
    },
    {
      name: "null removes a base key (its default applies again)",
      text: COMMENTED,
      edit: { staging: { staging_keep_recent_gb: null } },
      lacks: ["staging_keep_recent_gb"],
      doc: { model_store: { staging: { cleanup_on_deactivate: true } } },
    },
    {
      name: "removing the last override key removes the emptied override",
      text: `${COMMENTED}node_overrides:\n  node-1:\n    model_store:\n      staging:\n        headroom_gb: 1\n  node-2:\n    model_store:\n      staging:\n        headroom_gb: 3\n`,
      edit: { node_override: { headroom_gb: null } },
      lacks: ["  node-1:"],
      doc: { node_overrides: { "node-2": { model_store: { staging: { headroom_gb: 3 } } } } },
    },
    {
      name: "removing the only override removes node_overrides",
      text: `${COMMENTED}node_overrides:\n  node-1:\n    model_store:\n      staging:\n        headroom_gb: 1\n`,
      edit: { node_override: { headroom_gb: null } },
      has: ["# cluster node config"],
      lacks: ["node_overrides", "  node-1:"],
      doc: { model_store: { staging: { cleanup_on_deactivate: true } } },
    },
    {
      name: "removing a key of an override the file does not have changes nothing",
      text: COMMENTED,
      edit: {
        staging: { headroom_gb: 2 },
        node_override: {
          cleanup_on_deactivate: null,
          staging_keep_recent_gb: null,
          headroom_gb: null,
        },
      },
      lacks: ["node_overrides"],
      doc: { model_store: { staging: { headroom_gb: 2 } } },
    },
    {
      name: "an empty file gets the section",
      text: "",
      edit: { staging: { cleanup_on_deactivate: false } },
      doc: { model_store: { staging: { cleanup_on_deactivate: false } } },
    },
  ])("$name", ({ text, edit, has, lacks, doc }) => {
    const out = editStagingYaml(text, "node-1", SettingsEditSchema.parse(edit));
    for (const s of has ?? []) expect(out).toContain(s);
    for (const s of lacks ?? []) expect(out).not.toContain(s);
    expect(parse(out)).toMatchObject(doc);
  });

  it("refuses a file that is not YAML or not a mapping", () => {
    expect(() => editStagingYaml("a: [1,", "n", { staging: { headroom_gb: 1 } })).toThrow(
      ServiceError,
    );
    expect(() => editStagingYaml("- 1\n- 2\n", "n", { staging: { headroom_gb: 1 } })).toThrow(
      /not a mapping/,
    );
  });
});

describe("SettingsEditSchema", () => {
  it.each([
    [{}, false],
    [{ staging: {} }, true],
    [{ staging: { headroom_gb: 1 } }, true],
    [{ staging: { unknown_key: 1 } }, false],
    [{ node_override: { headroom_gb: null } }, true],
    [{ staging: { headroom_gb: 1 }, node: "x" }, false],
  ])("%j -> %s", (body, ok) => {
    expect(SettingsEditSchema.safeParse(body).success).toBe(ok);
  });
});

const fixture = (text = COMMENTED) => settingsFixture(text, "node-1");

describe("SettingsFile", () => {
  it("shows the file's sections, this node's override and what is applied", async () => {
    const { settings, file } = fixture(
      `${COMMENTED}node_overrides:\n  node-1:\n    model_store:\n      staging:\n        headroom_gb: 1\n`,
    );
    const v = await settings.view();
    expect(v).toMatchObject({
      node: "node-1",
      file,
      writable: true,
      staging: { cleanup_on_deactivate: true, staging_keep_recent_gb: 40, headroom_gb: 10 },
      node_override: { headroom_gb: 1 },
      effective: { cleanup_on_deactivate: true, staging_keep_recent_gb: 40, headroom_gb: 1 },
      applied: { cleanup_on_deactivate: true, staging_keep_recent_gb: 40, headroom_gb: 10 },
    });
  });

  it("writes a valid edit, keeps the comments and applies it live", async () => {
    const { settings, file, live, dir } = fixture();
    const v = await settings.update({
      staging: { staging_keep_recent_gb: 0.5 },
      node_override: { cleanup_on_deactivate: false },
    });
    const text = readFileSync(file, "utf8");
    expect(text).toContain("# how staged copies are kept");
    expect(text).toContain("staging_keep_recent_gb: 0.5 # grace budget");
    expect(live.keepRecentBytes).toBe(0.5 * GiB);
    expect(live.cleanupOnDeactivate).toBe(false);
    expect(v.applied).toEqual(v.effective);
    // No temporary file is left behind.
    expect(readdirSync(dir)).toEqual(["config.yaml"]);
  });

  it.each([
    [{ staging: { staging_keep_recent_gb: -1 } }, "model_store.staging.staging_keep_recent_gb"],
    [{ staging: { headroom_gb: "ten" } }, "model_store.staging.headroom_gb"],
    [
      { node_override: { cleanup_on_deactivate: "no" } },
      "node_overrides.node-1.model_store.staging.cleanup_on_deactivate",
    ],
  ])("refuses %j naming %s; the file and the live settings do not change", async (edit, key) => {
    const { settings, file, live, dir } = fixture();
    const before = readFileSync(file, "utf8");
    const err = await settings.update(SettingsEditSchema.parse(edit)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServiceError);
    expect((err as ServiceError).code).toBe("invalid_request");
    expect((err as ServiceError).message).toContain(key);
    expect(readFileSync(file, "utf8")).toBe(before);
    expect(live.keepRecentBytes).toBe(40 * GiB);
    expect(readdirSync(dir)).toEqual(["config.yaml"]);
  });

  it("serializes concurrent edits: both land in the file", async () => {
    const { settings, file } = fixture();
    await Promise.all([
      settings.update({ staging: { headroom_gb: 3 } }),
      settings.update({ staging: { staging_keep_recent_gb: 7 } }),
    ]);
    expect(parse(readFileSync(file, "utf8"))).toMatchObject({
      model_store: { staging: { headroom_gb: 3, staging_keep_recent_gb: 7 } },
    });
  });

  it("without a config file: read only, and an edit is a conflict", async () => {
    const live = new LiveStagingSettings({
      cleanupOnDeactivate: true,
      keepRecentBytes: 0,
      headroomBytes: 0,
    });
    const s = new SettingsFile({ file: undefined, nodeName: "n", live });
    expect(await s.view()).toMatchObject({ file: null, writable: false });
    await expect(s.update({ staging: { headroom_gb: 1 } })).rejects.toMatchObject({
      code: "conflict",
    });
  });
});
