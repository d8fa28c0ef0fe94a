import { mkdtemp, readFile, rm, stat, writeFile, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import { parseDotenv, setDotenv } from "./dotenv.ts";
import { maskToken, TokenStore } from "./token-store.ts";

describe("dotenv", () => {
  it("parses assignments, export, quotes and comments", () => {
    const m = parseDotenv("# c\nA=1\nexport B=\"two words\"\nC='x'\nD=val # note\n\nbad line\n");
    expect(Object.fromEntries(m)).toEqual({ A: "1", B: "two words", C: "x", D: "val" });
  });

  it("replaces only the key's line and keeps everything else", () => {
    expect(setDotenv("# mine\nOTHER=1\nHF_TOKEN=old\n", "HF_TOKEN", "hf_new")).toBe(
      "# mine\nOTHER=1\nHF_TOKEN=hf_new\n",
    );
    expect(setDotenv("", "HF_TOKEN", "hf_x")).toBe("HF_TOKEN=hf_x\n");
    expect(parseDotenv(setDotenv("", "K", 'a "b"')).get("K")).toBe('a "b"');
  });
});

describe("maskToken", () => {
  it.each([
    ["hf_abcdefghijklmnopqrstuvwxyz", "hf_a…wxyz"],
    ["hf_abcdefgh", "hf…gh"],
    ["abcd", "a…d"],
    ["abc", "****"],
  ])("masks %s as %s", (token, masked) => {
    expect(maskToken(token)).toBe(masked);
  });
});

describe("TokenStore", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "token-store-"));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("prefers HF_TOKEN from the environment over the dotenv file", async () => {
    await mkdir(join(dir, "cfg"));
    await writeFile(join(dir, "cfg", ".env"), "HF_TOKEN=hf_fromfile\n");
    const store = new TokenStore({
      configDir: join(dir, "cfg"),
      envToken: "hf_fromenv",
      log: silentLogger(),
    });
    await store.load();
    expect(store.get()).toBe("hf_fromenv");
  });

  it("falls back to the dotenv file, and has no token when neither is set", async () => {
    const none = new TokenStore({ configDir: join(dir, "nothing"), log: silentLogger() });
    await none.load();
    expect(none.get()).toBeUndefined();
    expect(none.masked()).toBeNull();
    await mkdir(join(dir, "cfg"));
    await writeFile(join(dir, "cfg", ".env"), "HF_TOKEN=hf_fromfile0000\n");
    const store = new TokenStore({
      configDir: join(dir, "cfg"),
      envToken: "",
      log: silentLogger(),
    });
    await store.load();
    expect(store.get()).toBe("hf_fromfile0000");
  });

  it("saves with mode 0600 in a 0700 directory, keeping other settings", async () => {
    const cfg = join(dir, "new", "weights-publisher");
    const store = new TokenStore({ configDir: cfg, log: silentLogger() });
    await store.set("hf_first");
    await writeFile(join(cfg, ".env"), "OTHER=keep\nHF_TOKEN=hf_first\n", { mode: 0o644 });
    await store.set("hf_second000");
    expect((await stat(join(cfg, ".env"))).mode & 0o777).toBe(0o600);
    expect((await stat(cfg)).mode & 0o777).toBe(0o700);
    expect(await readFile(join(cfg, ".env"), "utf8")).toBe("OTHER=keep\nHF_TOKEN=hf_second000\n");
    expect(store.get()).toBe("hf_second000");
    const reloaded = new TokenStore({ configDir: cfg, log: silentLogger() });
    await reloaded.load();
    expect(reloaded.masked()).toBe("hf_…000");
  });
});
