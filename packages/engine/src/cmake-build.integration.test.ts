// The engine build step (cmakeBuild of scripts/build-engine.mjs, which setup.mjs runs for llama.cpp)
// on a small synthetic CMake project with real cmake and a real compiler: the terminal gets the log's
// path and each target's percentage, never a compiler warning; the log gets everything; a failure
// names the log and shows its tail. Also: the bundled llama.cpp has the options portable images use.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  BuildError,
  cmakeBuild,
  engineCacheRoot,
  supportsAllVariants,
} from "../../../scripts/build-engine.mjs";

const work = mkdtempSync(join(tmpdir(), "ic-cmake-build-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A CMake project: a static library of three C files (one with a warning) and two programs. */
function project(name: string, broken = false): string {
  const src = join(work, name, "src");
  mkdirSync(src, { recursive: true });
  const files: Record<string, string> = {
    "CMakeLists.txt": [
      "cmake_minimum_required(VERSION 3.13)",
      "project(synthetic C)",
      "add_compile_options(-Wall -Wextra)",
      "add_library(parts STATIC a.c b.c c.c)",
      "add_executable(tool-one main1.c)",
      "target_link_libraries(tool-one parts)",
      "add_executable(tool-two main2.c)",
      "target_link_libraries(tool-two parts)",
      "",
    ].join("\n"),
    "a.c": "int a(void) { int unused_in_a = 1; return 1; }\n",
    "b.c": broken ? "int b(void) { return 2 }\n" : "int b(void) { return 2; }\n",
    "c.c": "int c(void) { return 3; }\n",
    "main1.c": "int a(void); int main(void) { return a() - 1; }\n",
    "main2.c": "int b(void); int c(void); int main(void) { return b() + c() - 5; }\n",
  };
  for (const [f, text] of Object.entries(files)) writeFileSync(join(src, f), text);
  return src;
}

async function build(name: string, tty: boolean, broken = false) {
  const src = project(name, broken);
  const out: string[] = [];
  const logFile = join(work, name, "log", "build.log");
  const buildDir = join(work, name, "build");
  const run = cmakeBuild({
    src,
    build: buildDir,
    targets: ["tool-one", "tool-two"],
    jobs: 2,
    logFile,
    write: (s) => out.push(s),
    tty,
  });
  return { run, out, logFile, buildDir };
}

describe("cmakeBuild", () => {
  it("off a terminal: the log's path and 10% steps per target; warnings only in the log", async () => {
    const b = await build("plain", false);
    await b.run;
    expect(existsSync(join(b.buildDir, "tool-one"))).toBe(true);
    expect(existsSync(join(b.buildDir, "tool-two"))).toBe(true);
    const terminal = b.out.join("");
    expect(b.out[0]).toBe(`[engine] full cmake and compiler output: ${b.logFile}\n`);
    expect(terminal).not.toMatch(/warning|unused_in_a|Building C object/);
    for (const target of ["tool-one", "tool-two"]) {
      const steps = b.out
        .filter((l) => l.includes(`building ${target}:`))
        .map((l) => Number(/: (\d+)%/.exec(l)![1]));
      expect(steps.length).toBeGreaterThan(0);
      expect(steps.every((s) => s % 10 === 0)).toBe(true);
      expect(steps).toEqual([...steps].sort((x, y) => x - y));
      expect(steps.at(-1)).toBe(100);
    }
    const log = readFileSync(b.logFile, "utf8");
    expect(log).toMatch(/a\.c:1:\d+: warning: unused variable .unused_in_a./);
    expect(log).toMatch(/^\$ cmake -S /m);
    expect(log).toMatch(/^\[100%\] Built target tool-two$/m);
  });

  it("on a terminal: one line per target rewritten in place", async () => {
    const b = await build("tty", true);
    await b.run;
    const terminal = b.out.slice(1).join("");
    expect(terminal).not.toMatch(/warning/);
    const lines = terminal.split("\n").filter(Boolean);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/building tool-one: 100% \(\d+s\)$/);
    expect(lines[1]).toMatch(/building tool-two: 100% \(\d+s\)$/);
    expect(lines[0]!.startsWith("\r\x1b[K")).toBe(true);
  });

  it("a failed build rejects with the log's tail and path, and prints no compiler output itself", async () => {
    const b = await build("broken", false, true);
    const err = await b.run.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BuildError);
    const e = err as BuildError;
    expect(e.logFile).toBe(b.logFile);
    expect(e.message).toContain(`full log: ${b.logFile}`);
    expect(e.message).toMatch(/cmake build of tool-one failed \(exit \d+\)/);
    expect(e.tail).toMatch(/b\.c:1:\d+: error: expected .;. before/);
    expect(b.out.join("")).not.toMatch(/error|warning/);
  });

  it("a failed configure rejects the same way", async () => {
    const src = join(work, "no-project");
    mkdirSync(src, { recursive: true });
    writeFileSync(join(src, "CMakeLists.txt"), "this is not cmake(\n");
    const logFile = join(work, "no-project-log", "build.log");
    const err = await cmakeBuild({
      src,
      build: join(work, "no-project-build"),
      targets: ["x"],
      logFile,
      write: () => {},
      tty: false,
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BuildError);
    expect((err as BuildError).message).toMatch(/^cmake configure failed \(exit \d+\)/);
    expect((err as BuildError).tail).toMatch(/CMake Error/);
  });
});

describe("the bundled llama.cpp", () => {
  // setup.mjs fetches the bundle before building; without it there is nothing to read.
  const srcDir = join(engineCacheRoot(), "src");
  const bundle = existsSync(srcDir)
    ? readdirSync(srcDir).find((f) => f.endsWith(".bundle"))
    : undefined;

  it.skipIf(!bundle)(
    "has GGML_CPU_ALL_VARIANTS and GGML_BACKEND_DL, which portable builds use",
    () => {
      const git = join(work, "bundle.git");
      execFileSync("git", ["clone", "--quiet", "--bare", join(srcDir, bundle!), git]);
      const text = execFileSync("git", [
        "--git-dir",
        git,
        "show",
        "HEAD:ggml/CMakeLists.txt",
      ]).toString();
      const src = join(work, "bundled");
      mkdirSync(join(src, "ggml"), { recursive: true });
      writeFileSync(join(src, "ggml", "CMakeLists.txt"), text);
      expect(supportsAllVariants(src, "linux", "x64")).toBe(true);
    },
  );
});
