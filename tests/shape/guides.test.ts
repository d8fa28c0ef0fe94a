// Guides that cannot drift: every file a doc, the README or a code comment names exists (as a path
// from the root or from the guide, a path's tail, or a file's name), and every code name the docs
// give in backticks is a word of the source. Names of things outside the repository are listed
// below, each with what it is.
import { describe, expect, it } from "vitest";
import { codeMentions, fileMentions, fileResolver, sourceWords } from "./guides.ts";
import type { Mention } from "./guides.ts";

/** Files named that are not the repository's. */
const OUTSIDE_FILES: ReadonlyMap<string, string> = new Map([
  ["nats.js", "the NATS client library for Node"],
  ["Node.js", "the runtime"],
]);
/** Paths under these are not the repository's. */
const OUTSIDE_PREFIXES: ReadonlyMap<string, string> = new Map([
  ["node_modules/", "installed dependencies (a profile names their files)"],
  ["spec/", "the specification, given to the project beside it (../shared/spec)"],
]);
/** Code names that are not the repository's. */
const OUTSIDE_CODE: ReadonlyMap<string, string> = new Map([
  ["OpenAIEmbeddings", "LangChain's embeddings client"],
  ["authToken", "an option of the Anthropic SDK's client"],
  ["writeBuffer", "a function of nats.js, in a profile"],
  ["getName", "a function of Node's internals, in a profile"],
  ["parseSafetensorsMetadata", "a function of @huggingface/hub"],
  ["checkJs", "a TypeScript compiler option"],
  ["maxWorkers", "a vitest option (npm test passes it on the command line)"],
  ["fileParallelism", "a vitest option the projects' config no longer sets"],
]);

const show = (ms: readonly Mention[]) => ms.map((m) => `${m.where}:${m.line} ${m.name}`);

describe("guides name what exists", () => {
  it("every file a guide names exists", () => {
    const exists = fileResolver();
    const missing = fileMentions().filter(
      (m) =>
        !OUTSIDE_FILES.has(m.name) &&
        ![...OUTSIDE_PREFIXES.keys()].some((p) => m.name.startsWith(p)) &&
        !exists(m),
    );
    expect(show(missing)).toEqual([]);
  });

  it("every code name the docs give is in the source", () => {
    const words = sourceWords();
    const missing = codeMentions().filter((m) => !OUTSIDE_CODE.has(m.name) && !words.has(m.name));
    expect(show(missing)).toEqual([]);
  });

  it("finds a name that does not exist", () => {
    const exists = fileResolver();
    expect(exists({ where: "docs/x.md", line: 1, name: "store/src/routes.ts" })).toBe(false);
    expect(exists({ where: "docs/x.md", line: 1, name: "staging/routes.ts" })).toBe(true);
    expect(sourceWords().has("httpStatusOf")).toBe(false);
  });
});
