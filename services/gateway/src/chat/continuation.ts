// A stream's continuation elsewhere: when a stream loses its instance after the client got part of
// it, or its node drains, the request continued from there (migration.ts) is opened on another ready
// instance, and its outcome is reported (metrics, a log line). relay.ts splices it into the stream.
import type { ServiceError } from "@ic/protocol";
import { continuationRequest } from "../migration.ts";
import type { MigrationOutcome, MigrationReport, StreamSoFar } from "../migration.ts";
import type { ChatContext, RequestContext } from "./request.ts";
import { pick, readyOthers } from "./routing.ts";
import { clientClosed, openLeg } from "./leg.ts";
import type { Leg } from "./leg.ts";
import type { CarriedCache } from "./handover.ts";

/**
 * The continuation of a stream lost after the client got `sofar`: the request continued from
 * there (migration.ts), sent to another ready instance off draining nodes (the one its cache moved
 * to, naming the restored slot), within the request's total bound, answered with a 200. Undefined
 * (its outcome reported) when there is none.
 */
export async function openContinuation(
  ctx: ChatContext,
  request: RequestContext,
  sofar: StreamSoFar,
  {
    outcome,
    carried,
  }: {
    readonly outcome: ReturnType<typeof migrationOutcomes>;
    /** The cache moved ahead of it: the continuation goes where it went, naming its slot. */
    readonly carried: CarriedCache | undefined;
  },
): Promise<{ leg: Leg; to: string; maxTokens: number | undefined } | undefined> {
  const { c } = request;
  const plan = continuationRequest(request.body, sofar);
  if (!plan.ok) return void outcome("not_continuable", { why: plan.why });
  if (Date.now() >= request.deadline)
    return void outcome("failed", { why: "the request's total bound has passed" });
  const live = ctx.o.cluster.livePeers();
  const others = carried ? [carried.target] : readyOthers(ctx, request, live);
  if (others.length === 0 || clientClosed(c, request)) return void outcome("no_instance");
  // The continuation's engine starts its own byte count: the stream is not readable again.
  request.resumable = false;
  const target = carried ? carried.target : pick(ctx, others, live, request);
  const to = target.instance.instance_id;
  request.tried.add(to);
  const body = carried?.result.ok
    ? { ...plan.body, id_slot: carried.result.restored.slot }
    : plan.body;
  let leg: Leg;
  try {
    leg = await openLeg(ctx, request, { target, body, obs: undefined });
  } catch (e) {
    return void outcome("failed", { to, err: (e as Error).message });
  }
  if (leg.status !== 200 || clientClosed(c, request)) {
    leg.abort.abort(new Error("the continuation was refused or the client left"));
    leg.close(false);
    return void outcome("failed", { to, status: leg.status });
  }
  return { leg, to, maxTokens: plan.maxTokens };
}

/** Reports a migration's outcome (onMigration, for metrics; a log line), timed from this call. */
export function migrationOutcomes(
  ctx: ChatContext,
  request: Pick<RequestContext, "commandId" | "body">,
  { from, err }: { readonly from: string; readonly err: ServiceError },
) {
  const { commandId } = request;
  const model = request.body.model;
  const lossAt = performance.now();
  return (result: MigrationOutcome, extra: Record<string, unknown> = {}) => {
    const ms = performance.now() - lossAt;
    reportMigration(ctx, { model, outcome: result, seconds: ms / 1000 });
    const fields = {
      command: commandId,
      model,
      from,
      code: err.code,
      outcome: result,
      ms: Math.round(ms),
      ...extra,
    };
    if (result === "migrated") ctx.o.log.info(fields, "stream migrated to another ready instance");
    else ctx.o.log.warn(fields, "stream lost its instance and was not migrated");
  };
}

export function reportMigration(ctx: ChatContext, m: MigrationReport): void {
  try {
    ctx.o.onMigration?.(m);
  } catch (e) {
    ctx.o.log.warn({ err: (e as Error).message }, "the migration observer failed");
  }
}
