// `npm run bench [name...]`: runs the named benchmarks (every bench/<name>/main.ts when none is
// named), one after another, each in its own process; each writes its section of docs/benchmarks.md.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const all = readdirSync(here, { withFileTypes: true })
  .filter((d) => d.isDirectory() && existsSync(join(here, d.name, "main.ts")))
  .map((d) => d.name)
  .sort();
const wanted = process.argv.slice(2);
const unknown = wanted.filter((n) => !all.includes(n));
if (unknown.length) {
  console.error(`unknown benchmark(s): ${unknown.join(", ")}; there are: ${all.join(", ")}`);
  process.exit(2);
}
for (const name of wanted.length ? wanted : all) {
  console.log(`\n=== bench/${name}`);
  const r = spawnSync(process.execPath, ["--import", "tsx", join(here, name, "main.ts")], {
    stdio: "inherit",
    cwd: join(here, ".."),
  });
  if (r.status !== 0) {
    console.error(`bench/${name} failed (exit ${r.status ?? r.signal})`);
    process.exit(1);
  }
}
