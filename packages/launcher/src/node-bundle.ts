// The node's code as two plain JavaScript files (the supervisor and the node process), built with
// esbuild from services/node/src/main.ts and run-node.ts. A node started through tsx spends about
// 1.5 s of CPU per process on its loader hooks alone (some 2 s before its first line runs); a bundle
// starts in well under a second. The code is the same: every `import.meta.url` keeps the URL of the
// file it was written in. Installed packages are bundled in too: a node process then loads one file
// instead of ~900 (zod, undici, nats, systeminformation, ...): 0.65 s of CPU per start instead of
// 1.25 s, and the integration suite starts some 300 nodes. The bundle's own `require` (createRequire)
// serves the node builtins that CommonJS packages require.
// The output is content-addressed (node_modules/.cache/<name>/<hash>/): it can never be stale, and
// launchers started side by side share it. The CLI's tests run the `ic` command from such a bundle
// too (services/cli/src/test-support.ts): about 50 runs, each ~0.35 s of CPU less than through tsx.
import { createHash } from "node:crypto";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
} from "node:fs";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { build } from "esbuild";
import type { Plugin } from "esbuild";

/** A bundle's first entry (the one to run) and the directory of all its entries. */
export interface NodeBundle {
  readonly main: string;
  readonly dir: string;
}

/** The supervisor's entry and the node process's, as the bundle names them. */
const ENTRIES = { main: "services/node/src/main.ts", "run-node": "services/node/src/run-node.ts" };
/** Bundles kept beside the newest (older ones are removed when a new one is written). */
const KEEP = 4;

/** The node's bundle: its supervisor (`main`) and the node process (`run-node`). */
export function buildNodeBundle(repoRoot: string): Promise<NodeBundle> {
  return buildBundle(repoRoot, ENTRIES, "ic-node");
}

/**
 * The node's bundle copied to `dir` (the supervisor and the node process), for an image to run:
 * node runs the supervisor's file, whose path this returns, as it would services/node/src/main.ts
 * through tsx. Its `import.meta.url`s name the sources under `repoRoot`: it runs where it was built.
 */
export async function writeNodeBundle(repoRoot: string, dir: string): Promise<string> {
  const b = await buildNodeBundle(repoRoot);
  mkdirSync(dir, { recursive: true });
  for (const f of readdirSync(b.dir)) copyFileSync(join(b.dir, f), join(dir, f));
  return join(dir, "main.mjs");
}

/**
 * Builds a bundle of `entries` (output name to source path, relative to `repoRoot`; the first is
 * `main`) under node_modules/.cache/`name`, about a second, unless this exact output is there.
 */
export async function buildBundle(
  repoRoot: string,
  entries: Readonly<Record<string, string>>,
  name: string,
): Promise<NodeBundle> {
  const out = await build({
    entryPoints: Object.fromEntries(
      Object.entries(entries).map(([entry, path]) => [entry, join(repoRoot, path)]),
    ),
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    outdir: "/",
    outExtension: { ".js": ".mjs" },
    write: false,
    logLevel: "silent",
    banner: { js: BUNDLE_REQUIRE },
    plugins: [fileUrlsAsWritten(repoRoot)],
  });
  const hash = createHash("sha256");
  for (const f of out.outputFiles) hash.update(f.path).update(f.contents);
  const root = join(repoRoot, "node_modules/.cache", name);
  const dir = join(root, hash.digest("hex").slice(0, 16));
  if (!existsSync(dir)) {
    const tmp = `${dir}.${process.pid}.tmp`;
    mkdirSync(tmp, { recursive: true });
    for (const f of out.outputFiles) writeFileSync(join(tmp, f.path.slice(1)), f.contents);
    try {
      renameSync(tmp, dir);
    } catch {
      rmSync(tmp, { recursive: true, force: true }); // another launcher wrote the same bundle
    }
    pruneOld(root, dir);
  }
  return { main: join(dir, `${Object.keys(entries)[0]}.mjs`), dir };
}

/**
 * `require` for the CommonJS packages in the bundle (pino, prom-client, systeminformation, ...): in
 * an ES module esbuild's `require` shim throws unless the module has one of its own.
 */
const BUNDLE_REQUIRE =
  'import { createRequire as __icCreateRequire } from "node:module"; const require = __icCreateRequire(import.meta.url);';

/** `import.meta.url` in a workspace file stays that file's URL (paths to assets beside it hold). */
function fileUrlsAsWritten(repoRoot: string): Plugin {
  return {
    name: "file-urls",
    setup(b) {
      b.onLoad({ filter: /\.ts$/ }, (args) => {
        if (!args.path.startsWith(repoRoot) || args.path.includes("/node_modules/"))
          return undefined;
        const source = readFileSync(args.path, "utf8");
        const url = JSON.stringify(pathToFileURL(args.path).href);
        return { contents: source.replaceAll("import.meta.url", url), loader: "ts" };
      });
    },
  };
}

function pruneOld(root: string, keep: string): void {
  const dirs = readdirSync(root)
    .filter((d) => !d.endsWith(".tmp"))
    .map((d) => join(root, d))
    .filter((d) => d !== keep)
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  for (const d of dirs.slice(KEEP)) rmSync(d, { recursive: true, force: true });
}
