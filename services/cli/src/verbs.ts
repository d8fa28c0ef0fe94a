// What each verb of the ic command does, over the node HTTP API (docs/api.md): the table from a
// verb's name to its runner. The verbs live in verbs/, grouped by what they act on.
import { UsageError } from "./args.ts";
import type { Parsed } from "./args.ts";
import type { Client } from "./client.ts";
import type { Io } from "./verbs/common.ts";
import { verbDoctor, verbStart, verbStatus } from "./verbs/cluster.ts";
import { verbChat, verbPlace, verbPreviews, verbRm } from "./verbs/instances.ts";
import {
  verbImport,
  verbModels,
  verbPull,
  verbPulls,
  verbPurge,
  verbStorage,
} from "./verbs/models.ts";
import { verbLogs, verbTraces } from "./verbs/observe.ts";

/** What `run` calls for each verb of `ic` (args.ts's VERBS holds their options and help). */
export const RUNNERS: Readonly<Record<string, (p: Parsed, c: Client, io: Io) => Promise<number>>> =
  {
    start: verbStart,
    status: verbStatus,
    models: verbModels,
    pull: verbPull,
    import: verbImport,
    pulls: verbPulls,
    place: verbPlace,
    previews: verbPreviews,
    rm: verbRm,
    chat: verbChat,
    logs: verbLogs,
    storage: verbStorage,
    purge: verbPurge,
    traces: verbTraces,
    doctor: verbDoctor,
  };

export async function run(p: Parsed, c: Client, io: Io): Promise<number> {
  const verb = Object.hasOwn(RUNNERS, p.verb) ? RUNNERS[p.verb] : undefined;
  if (!verb) throw new UsageError(`unknown verb "${p.verb}"`);
  return verb(p, c, io);
}
