// Failover bench, the analysis: medians and ranges of the runs' samples, and the report's tables.
import { summarize } from "../lib/report.ts";
import { DELAYS, PLAN, TIMINGS } from "./common.ts";
import type { Kind, Sample } from "./common.ts";
import type { ServeSample, Steps } from "./serving.ts";

export const ms = (x: number) => x.toFixed(0);
export const finite = (xs: readonly (number | undefined)[]) =>
  xs.filter((x): x is number => x !== undefined && Number.isFinite(x));
export const median = (xs: readonly (number | undefined)[]) => {
  const f = finite(xs);
  return f.length ? summarize(f).median : NaN;
};
export const range = (xs: readonly (number | undefined)[]) => {
  const f = finite(xs);
  return f.length ? `${ms(Math.min(...f))}–${ms(Math.max(...f))}` : "–";
};
export const cell = (x: number) => (Number.isFinite(x) ? ms(x) : "–");

/** Target of the fast path (issue: "median < 1 s"), and the spec's window for silent failures. */
const FAST_TARGET_MS = 1000;
export const SPEC_WINDOW_MS = [4000, 6000] as const;

interface Row {
  what: string;
  kind: Kind;
  delays: readonly number[];
  /** Per run: ms from the kill (or cut) to done; several values per run where several requests. */
  done: (s: Sample) => (number | undefined)[];
  baselineName: string;
  baseline: number;
  target: string;
  met: (median: number, worst: number) => boolean;
}

const ROWS: Row[] = [
  {
    what: "kill -9 of the master -> every survivor synced in one new session without it",
    kind: "master",
    delays: DELAYS,
    done: (s) => [Math.max(s.session!, s.gone)],
    baselineName: "election timeout",
    baseline: TIMINGS.election_timeout_ms,
    target: `median < ${FAST_TARGET_MS}`,
    met: (m) => m < FAST_TARGET_MS,
  },
  {
    what: "kill -9 of a worker -> removed from node_identities on all survivors",
    kind: "worker",
    delays: DELAYS,
    done: (s) => [s.gone],
    baselineName: "liveness timeout",
    baseline: TIMINGS.liveness_timeout_ms,
    target: `median < ${FAST_TARGET_MS}`,
    met: (m) => m < FAST_TARGET_MS,
  },
  {
    what: "kill -9 of a worker -> its open requests (1 streaming, 1 not, through another node) fail",
    kind: "worker",
    delays: DELAYS,
    done: (s) => (s.requests ?? []).map((r) => r.ended),
    baselineName: "liveness timeout",
    baseline: TIMINGS.liveness_timeout_ms,
    target: `median < ${FAST_TARGET_MS}`,
    met: (m) => m < FAST_TARGET_MS,
  },
  {
    what: "a worker's host cut off by the network (blackhole routes both ways) -> removed from node_identities on all survivors",
    kind: "cut",
    delays: [0],
    done: (s) => [s.gone],
    baselineName: "liveness timeout",
    baseline: TIMINGS.liveness_timeout_ms,
    target: `within the spec's ${SPEC_WINDOW_MS[0] / 1000}–${SPEC_WINDOW_MS[1] / 1000} s`,
    met: (_m, worst) => worst <= SPEC_WINDOW_MS[1],
  },
];

/** The samples of one kill setting, over every run. */
export type SamplesOf = (kind: Kind, delay: number) => Sample[];

const delayCell = (d: number) => (d ? `${d} ms` : "none");

/** "value ×count" for each distinct value, in order of first appearance. */
const count = (xs: readonly (string | undefined)[]) => {
  const c: Record<string, number> = {};
  for (const x of xs) c[x ?? "not logged"] = (c[x ?? "not logged"] ?? 0) + 1;
  return Object.entries(c)
    .map(([k, n]) => `${k} ×${n}`)
    .join(", ");
};

/** "median (range)", or "–" where no run saw it. */
export const span = (xs: readonly (number | undefined)[]) =>
  finite(xs).length ? `${cell(median(xs))} (${range(xs)})` : "–";

/** The first table's rows: each ROWS entry per route delay, against its baseline and target. */
function killRows(list: SamplesOf): string[] {
  const fromKill: string[] = [];
  const verdicts: string[] = [];
  for (const r of ROWS) {
    for (const delay of r.delays) {
      const xs = list(r.kind, delay).flatMap(r.done);
      const m = median(xs);
      const worst = Math.max(...finite(xs));
      const met = r.met(m, worst);
      verdicts.push(met ? "met" : "missed");
      fromKill.push(
        `| ${r.what} | ${delayCell(delay)} | ${cell(m)} | ${range(xs)} | ${r.baselineName} ${r.baseline} | ${(m / r.baseline).toFixed(2)} | ${r.target}: **${met ? "met" : "not met"}** |`,
      );
    }
  }
  return fromKill;
}

/** The parts of each kill, and how each victim was declared gone. */
function partRows(list: SamplesOf): string[] {
  const parts: string[] = [];
  for (const [kind, delay] of PLAN) {
    const l = list(kind, delay);
    const decision = (s: Sample) => (kind === "master" ? s.elected : s.lost);
    const what =
      kind === "master"
        ? "kill -9 of the master"
        : kind === "worker"
          ? "kill -9 of a worker"
          : "a worker's host cut off";
    parts.push(
      `| ${what} | ${delayCell(delay)} | ${count(l.map((s) => s.reason))} | ${span(l.map((s) => s.detected))} | ${span(
        l.map((s) => {
          const d = decision(s);
          return d === undefined || s.detected === undefined ? undefined : d - s.detected;
        }),
      )} | ${span(
        l.map((s) => {
          const d = decision(s);
          return d === undefined
            ? undefined
            : (kind === "master" ? Math.max(s.session!, s.gone) : s.gone) - d;
        }),
      )} | ${span(l.map((s) => s.silentAtKill))} |`,
    );
  }
  return parts;
}

/** What the report says about the kills. */
export interface KillFigures {
  /** The first table's rows (the serving row is added after). */
  fromKill: string[];
  parts: string[];
  outcomes: string;
  allDetected: (number | undefined)[];
  relayTries: number;
  relayTimeouts: number;
  probeKinds: (kind: Kind, delay: number) => string;
  /** elected -> adopted, per route delay. */
  hops: (number | undefined)[][];
  cutTickWait: (number | undefined)[];
  masterFast: number;
  workerFast: number;
}

export function analyzeKills(list: SamplesOf): KillFigures {
  const allDetected = PLAN.flatMap(([k, d]) => list(k, d).map((x) => x.detected));
  const relayed = (["master", "worker"] as const).flatMap((k) =>
    list(k, DELAYS[1]).flatMap((x) => x.probes ?? []),
  );
  const probeKinds = (kind: Kind, delay: number) =>
    count(list(kind, delay).flatMap((s) => s.probes ?? []));
  const outcomes = count(
    DELAYS.flatMap((d) =>
      list("worker", d).flatMap((s) => (s.requests ?? []).map((r) => `${r.kind}: ${r.outcome}`)),
    ),
  );
  const hops = DELAYS.map((delay) =>
    list("master", delay).map((s) =>
      s.adopted === undefined || s.elected === undefined ? undefined : s.adopted - s.elected,
    ),
  );
  const cutTickWait = list("cut", 0).map((s) =>
    s.lost === undefined ? undefined : s.lost + s.silentAtKill - TIMINGS.liveness_timeout_ms,
  );
  const [masterFast, workerFast] = [
    median(DELAYS.map((d) => median(list("master", d).map((s) => s.detected)))),
    median(DELAYS.map((d) => median(list("worker", d).map((s) => s.detected)))),
  ];
  return {
    fromKill: killRows(list),
    parts: partRows(list),
    outcomes,
    allDetected,
    relayTries: relayed.length,
    relayTimeouts: relayed.filter((x) => x === "timed out").length,
    probeKinds,
    hops,
    cutTickWait,
    masterFast,
    workerFast,
  };
}

/** Which start of a run a step span reads: its steps, and the time of its first 200 chat. */
interface StartReading {
  steps: (s: ServeSample) => Steps;
  first200: (s: ServeSample) => number;
}

/** Median (range) of b - a over the runs, where both steps were seen. */
const stepSpan = (
  l: readonly ServeSample[],
  { steps, first200 }: StartReading,
  a: keyof Steps | 0,
  b: keyof Steps | "first200",
) =>
  span(
    l.map((s) => {
      const st = steps(s);
      const from = a === 0 ? 0 : st[a];
      const to = b === "first200" ? first200(s) : st[b];
      return from === undefined || to === undefined ? undefined : to - from;
    }),
  );

/** The serving table's rows: each step of the plain start and of the start after the kill. */
function serveStepRows(
  serving: readonly ServeSample[],
  startMedian: number,
  servedMedian: number,
): string[] {
  const starts = serving.map((s) => s.start);
  const served = serving.map((s) => s.served);
  const plain = (a: keyof Steps | 0, b: keyof Steps | "first200") =>
    stepSpan(serving, { steps: (s) => s.startSteps, first200: (s) => s.start }, a, b);
  const again = (a: keyof Steps | 0, b: keyof Steps | "first200") =>
    stepSpan(serving, { steps: (s) => s.servedSteps, first200: (s) => s.served }, a, b);
  return [
    `| detection: kill -> the master's "node lost (…)" | – | ${again(0, "lost")} |`,
    `| reconcile: node lost -> "deployment placed again" | – | ${again("lost", "placed")} |`,
    `| placement (the POST, or the re-placement) -> the holder's "staging admitted" | ${plain(0, "admitted")} | ${again("placed", "admitted")} |`,
    `| staging from the store host: "staging admitted" -> "staged" | ${plain("admitted", "staged")} | ${again("admitted", "staged")} |`,
    `| "staged" -> "starting runner" (llama-server spawned) | ${plain("staged", "spawned")} | ${again("staged", "spawned")} |`,
    `| llama-server start: spawned -> "runner ready" (/health 200) | ${plain("spawned", "ready")} | ${again("spawned", "ready")} |`,
    `| first request: runner ready -> the first 200 chat | ${plain("ready", "first200")} | ${again("ready", "first200")} |`,
    `| **total** (from the POST / from the kill) | ${cell(startMedian)} (${range(starts)}) | ${cell(servedMedian)} (${range(served)}) |`,
  ];
}

/** "N bytes", or a range of them, or "not logged". */
const bytes = (xs: readonly number[]) =>
  !xs.length
    ? "not logged"
    : Math.min(...xs) === Math.max(...xs)
      ? `${ms(xs[0]!)} bytes`
      : `${ms(Math.min(...xs))}–${ms(Math.max(...xs))} bytes`;

/** What the report says about node lost -> model serving again. */
export interface ServeFigures {
  /** The first table's last row. */
  row: string;
  serveSteps: string[];
  answerList: string;
  fetchedBytes: string;
  detection: number;
  restart: number;
  holders: string;
  startMedian: number;
  servedMedian: number;
}

/** Node lost -> model serving again, against liveness timeout + a plain runner start. */
export function analyzeServing(serving: readonly ServeSample[]): ServeFigures {
  const served = serving.map((s) => s.served);
  const starts = serving.map((s) => s.start);
  const startMedian = median(starts);
  const serveBaseline = TIMINGS.liveness_timeout_ms + startMedian;
  const servedMedian = median(served);
  const serveWhat =
    "kill -9 of the node holding a model's only instance -> a 2-token chat through a survivor answers 200 again";
  const row = `| ${serveWhat} | none | ${ms(servedMedian)} | ${range(served)} | liveness timeout ${TIMINGS.liveness_timeout_ms} + plain runner start ${ms(startMedian)} = ${ms(serveBaseline)} | ${(servedMedian / serveBaseline).toFixed(2)} | – |`;
  const answers: Record<string, number> = {};
  for (const s of serving)
    for (const [k, n] of Object.entries(s.answers)) answers[k] = (answers[k] ?? 0) + n;
  const answerList = Object.entries(answers)
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${n}× \`${k}\``)
    .join(", ");
  const fetched = finite(serving.map((s) => s.fetchedBytes));
  const detection = median(serving.map((s) => s.servedSteps.lost));
  const restart = median(
    serving.map((s) =>
      s.servedSteps.lost === undefined ? undefined : s.served - s.servedSteps.lost,
    ),
  );
  const holders = serving.map((s) => `${s.holder} -> ${s.newHolder}`).join(", ");
  return {
    row,
    serveSteps: serveStepRows(serving, startMedian, servedMedian),
    answerList,
    fetchedBytes: bytes(fetched),
    detection,
    restart,
    holders,
    startMedian,
    servedMedian,
  };
}
