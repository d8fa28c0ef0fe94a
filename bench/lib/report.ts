// Shared by every benchmark: statistics and replacing one "## <title>" section of docs/benchmarks.md.
import { existsSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const BENCHMARKS_MD = join(REPO_ROOT, "docs", "benchmarks.md");

export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}

export function summarize(samples: readonly number[]): { median: number; p95: number; n: number } {
  const s = [...samples].sort((a, b) => a - b);
  return { median: quantile(s, 0.5), p95: quantile(s, 0.95), n: s.length };
}

/**
 * Replaces (or appends) the section headed `## <title>` in docs/benchmarks.md, or in the file named by
 * BENCH_REPORT (smoke runs with small settings write there, leaving the recorded figures alone).
 */
export async function writeSection(
  title: string,
  body: string,
  path = process.env.BENCH_REPORT ?? BENCHMARKS_MD,
): Promise<void> {
  const heading = `## ${title}`;
  const section = `${heading}\n\n${body.replace(/\n*$/, "")}\n`;
  const current = existsSync(path) ? await readFile(path, "utf8") : "# Benchmarks\n";
  const lines = current.split("\n");
  const start = lines.findIndex((l) => l.trim() === heading);
  let next: string;
  if (start === -1) {
    next = `${current.replace(/\n*$/, "")}\n\n${section}`;
  } else {
    let end = lines.findIndex((l, i) => i > start && l.startsWith("## "));
    if (end === -1) end = lines.length;
    next = [...lines.slice(0, start), ...section.split("\n"), ...lines.slice(end)].join("\n");
  }
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, next.replace(/\n*$/, "\n"));
}

export function machineLine(): string {
  return `Node ${process.version}, ${process.platform}/${process.arch}, run ${new Date().toISOString()}`;
}
