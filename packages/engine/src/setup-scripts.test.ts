// The pure parts of scripts/setup-plan.mjs and scripts/build-engine.mjs: what each use installs, the
// engine variants and their cmake arguments, and how build progress reaches the terminal. scripts/ is
// dependency-free and has no test project; its tests live here, beside the engine they produce.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  cmakeArgs,
  engineVariant,
  isPortable,
  progressOf,
  progressPrinter,
  supportsAllVariants,
  tailOf,
} from "../../../scripts/build-engine.mjs";
import { icLinkDir, setupPlan } from "../../../scripts/setup-plan.mjs";

const work = mkdtempSync(join(tmpdir(), "ic-setup-scripts-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** The Debian packages a command line asks for (no override variables set). */
function packages(argv: string[], env: NodeJS.ProcessEnv = {}): string[] {
  const plan = setupPlan(argv, env);
  if (plan.help) throw new Error("help");
  return plan.debian.map(([, pkg]) => pkg);
}

describe("icLinkDir: where setup links the ic command", () => {
  it.each([
    ["start", {}, true, "/usr/local/bin"],
    ["test", {}, false, "/home/op/.local/bin"],
    ["start", { IC_BIN_DIR: "/opt/bin" }, true, "/opt/bin"],
    ["publisher", {}, true, null],
    ["compose", {}, true, null],
  ] as const)("%s %j root=%s -> %s", (mode, env, root, want) => {
    expect(icLinkDir(mode, env, root, "/home/op")).toBe(want);
  });
});

/** What the engine build needs; what the compose test and compose.mjs need (setup-plan.mjs). */
const BUILD = ["cmake", "g++", "git", "libssl-dev"];
const CONTAINERS = ["podman", "runc", "podman-compose", "debootstrap", "netavark", "aardvark-dns"];

describe("setupPlan: what each use installs", () => {
  it.each([
    [[], ["nats-server", "openssl", ...BUILD]],
    [["--for=start"], ["nats-server", "openssl", ...BUILD]],
    [
      ["--for", "start"],
      ["nats-server", "openssl", ...BUILD],
    ],
    [["--for=test"], ["nats-server", "openssl", ...BUILD, "chromium", ...CONTAINERS, "systemd"]],
    [
      ["--for=test", "--no-browser"],
      ["nats-server", "openssl", ...BUILD, ...CONTAINERS, "systemd"],
    ],
    [
      ["--for=test", "--no-engine"],
      ["nats-server", "openssl", "chromium", ...CONTAINERS, "systemd"],
    ],
    [["--no-engine"], ["nats-server", "openssl"]],
    [["--for=publisher"], []],
    [["--for=compose"], ["openssl", ...CONTAINERS]],
  ])("%j -> %j", (argv, want) => {
    expect(packages(argv)).toEqual(want);
  });

  it("npm start never installs the browser; only the tests do", () => {
    expect(packages(["--for=start"])).not.toContain("chromium");
    expect(packages(["--for=test"])).toContain("chromium");
  });

  it("the engine is built for start and test, not for the publisher or with --no-engine", () => {
    const engine = (argv: string[]) => {
      const p = setupPlan(argv, {});
      return !p.help && p.engine;
    };
    expect(
      [[], ["--for=test"], ["--for=publisher"], ["--no-engine"], ["--for=compose"]].map(engine),
    ).toEqual([true, true, false, false, false]);
  });

  it("a binary named by its variable replaces the Debian package", () => {
    expect(
      packages(["--for=test"], { CHROMIUM_PATH: "/opt/chrome", NATS_SERVER_BIN: "/x" }),
    ).toEqual(["openssl", ...BUILD, ...CONTAINERS, "systemd"]);
  });

  it("ENGINE_PORTABLE makes the engine portable (the Dockerfile's path)", () => {
    const p = setupPlan(["--for=start"], { ENGINE_PORTABLE: "1" });
    expect(!p.help && p.portable).toBe(true);
    const q = setupPlan(["--for=publisher"], { ENGINE_PORTABLE: "1" });
    expect(!q.help && q.portable).toBe(false); // no engine, nothing to make portable
  });

  it("refuses what it does not know, naming it", () => {
    expect(() => setupPlan(["--for=prod"], {})).toThrow(/--for: expected one of start, test/);
    expect(() => setupPlan(["--browser"], {})).toThrow(/--browser/);
    expect(() => setupPlan(["start"], {})).toThrow();
    expect(() => setupPlan([], { ENGINE_PORTABLE: "maybe" })).toThrow(/ENGINE_PORTABLE/);
    expect(setupPlan(["--help"], {})).toEqual({ help: true });
  });
});

describe("engine variants", () => {
  it.each([
    [undefined, false],
    ["", false],
    ["0", false],
    ["false", false],
    ["off", false],
    ["1", true],
    ["true", true],
    ["YES", true],
  ])("ENGINE_PORTABLE=%j -> %j", (v, want) => {
    expect(isPortable(v === undefined ? {} : { ENGINE_PORTABLE: v })).toBe(want);
  });

  it("a native build keeps its cache key (<commit>-<backend>); a portable one gets its own", () => {
    expect(engineVariant({ backend: "cpu", portable: false })).toBe("cpu");
    expect(engineVariant({ backend: "cuda", portable: false })).toBe("cuda");
    expect(engineVariant({ backend: "cpu", portable: true })).toBe("cpu-portable");
    expect(engineVariant({ backend: "cuda", portable: true })).toBe("cuda-portable");
  });

  it("a native build is tuned for its CPU (ggml's GGML_NATIVE default) and links statically", () => {
    const a = cmakeArgs({ backend: "cpu" });
    expect(a).toContain("-DBUILD_SHARED_LIBS=OFF");
    expect(a.filter((x) => x.startsWith("-DGGML_NATIVE") || x.includes("VARIANTS"))).toEqual([]);
  });

  it("a portable build turns GGML_NATIVE off and builds every CPU variant as a loadable backend", () => {
    const a = cmakeArgs({ backend: "cpu", portable: true, allVariants: true, arch: "x64" });
    expect(a).toEqual(
      expect.arrayContaining([
        "-DGGML_NATIVE=OFF",
        "-DGGML_BACKEND_DL=ON",
        "-DGGML_CPU_ALL_VARIANTS=ON",
        "-DBUILD_SHARED_LIBS=ON", // GGML_BACKEND_DL requires it
      ]),
    );
    expect(a).not.toContain("-DBUILD_SHARED_LIBS=OFF");
    // No single instruction set is forced: each variant sets its own.
    expect(a.some((x) => /-DGGML_AVX/.test(x))).toBe(false);
  });

  it("without CPU variants, a portable x86-64 build stays at the baseline (GGML_NATIVE=OFF alone means AVX2)", () => {
    const a = cmakeArgs({ backend: "cpu", portable: true, allVariants: false, arch: "x64" });
    expect(a).toEqual(
      expect.arrayContaining([
        "-DGGML_NATIVE=OFF",
        "-DGGML_AVX=OFF",
        "-DGGML_AVX2=OFF",
        "-DGGML_FMA=OFF",
        "-DGGML_F16C=OFF",
        "-DGGML_BMI2=OFF",
      ]),
    );
    expect(a).toContain("-DBUILD_SHARED_LIBS=OFF");
    expect(cmakeArgs({ backend: "cpu", portable: true, arch: "arm64" })).not.toContain(
      "-DGGML_AVX=OFF",
    );
  });

  it("CUDA builds keep the CUDA backend, portable or not", () => {
    expect(cmakeArgs({ backend: "cuda" })).toContain("-DGGML_CUDA=ON");
    expect(cmakeArgs({ backend: "cuda", portable: true, allVariants: true })).toEqual(
      expect.arrayContaining(["-DGGML_CUDA=ON", "-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON"]),
    );
  });

  it("CPU variants are used only where the source has both options, on Linux", () => {
    const src = (name: string, text: string) => {
      const dir = join(work, name);
      mkdirSync(join(dir, "ggml"), { recursive: true });
      writeFileSync(join(dir, "ggml", "CMakeLists.txt"), text);
      return dir;
    };
    const both = src(
      "both",
      'option(GGML_BACKEND_DL "dl" OFF)\noption(GGML_CPU_ALL_VARIANTS "all" OFF)\n',
    );
    const old = src("old", 'option(GGML_NATIVE "native" ON)\n');
    expect(supportsAllVariants(both, "linux", "x64")).toBe(true);
    expect(supportsAllVariants(both, "linux", "arm64")).toBe(true);
    expect(supportsAllVariants(both, "darwin", "arm64")).toBe(false);
    expect(supportsAllVariants(old, "linux", "x64")).toBe(false);
    expect(supportsAllVariants(join(work, "none"), "linux", "x64")).toBe(false);
  });
});

describe("build progress on the terminal", () => {
  it.each([
    ["[ 42%] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o", 42],
    ["[  3%] Built target build_info", 3],
    ["[100%] Linking CXX executable ../../bin/llama-server", 100],
    ["[12/345] Building CXX object common/CMakeFiles/common.dir/arg.cpp.o", 3],
    ["[345/345] Linking CXX executable bin/llama-server", 100],
    ["/src/ggml.c:12:5: warning: unused variable 'x' [-Wunused-variable]", null],
    ["-- Configuring done", null],
    ["make[2]: Leaving directory '/build'", null],
  ])("%j -> %j", (line, want) => {
    expect(progressOf(line)).toBe(want);
  });

  function printed(tty: boolean, steps: number[]) {
    const out: string[] = [];
    let t = 0;
    const p = progressPrinter({
      write: (s) => out.push(s),
      tty,
      label: "building x",
      now: () => t,
    });
    for (const s of steps) {
      t += 7000;
      p.update(s);
    }
    p.end();
    return out;
  }

  it("off a terminal: one line per 10% done, never going back", () => {
    expect(printed(false, [1, 4, 9, 12, 35, 33, 36, 99, 100])).toEqual([
      "[engine] building x: 0% (7s)\n",
      "[engine] building x: 10% (28s)\n",
      "[engine] building x: 30% (35s)\n",
      "[engine] building x: 90% (56s)\n",
      "[engine] building x: 100% (1m 03s)\n",
    ]);
  });

  it("on a terminal: one line rewritten in place, ended by a newline", () => {
    const out = printed(true, [5, 5, 4, 50, 100]);
    expect(out).toEqual([
      "\r\x1b[K[engine] building x: 5% (7s)",
      "\r\x1b[K[engine] building x: 50% (28s)",
      "\r\x1b[K[engine] building x: 100% (35s)",
      "\n",
    ]);
    expect(printed(true, [])).toEqual([]);
  });

  it("a failure shows the log's last lines", () => {
    const f = join(work, "some.log");
    writeFileSync(f, `${Array.from({ length: 100 }, (_, i) => `line ${i}`).join("\n")}\n`);
    expect(tailOf(f, 3)).toBe("line 97\nline 98\nline 99");
    expect(tailOf(join(work, "missing.log"))).toBe("");
  });
});
