// The bus catalog: every subject, its message schema and (for requests) its reply schema.
// Subjects are lowercase and dotted; per-node subjects append the node's peer key.
import { z } from "zod";
import { IndexedEventSchema } from "./cluster.ts";
import {
  CommandReplySchema,
  CommandRequestSchema,
  SyncReplySchema,
  SyncRequestSchema,
} from "./commands.ts";
import { HeartbeatSchema } from "./telemetry.ts";
import { ModelIdSchema } from "./ids.ts";
import { WireErrorSchema } from "./errors.ts";
import { RunnerLogReplySchema, RunnerLogRequestSchema } from "./observability.ts";
import { PullRequestSchema, PullSchema } from "./store.ts";
import { PromptNoticesSchema, StreamNoticeSchema } from "./streams.ts";
import {
  KvRestoreReplySchema,
  KvRestoreRequestSchema,
  KvSaveReplySchema,
  KvSaveRequestSchema,
} from "./kv-move.ts";

export const PurgeRequestSchema = z.object({ model_id: ModelIdSchema.optional() });
export const PurgeReplySchema = z.object({
  peer_key: z.string(),
  name: z.string(),
  ok: z.boolean(),
  deleted: z.array(z.string()),
  freed_bytes: z.number().nonnegative(),
  skipped_in_use: z.array(z.string()),
  error: WireErrorSchema.optional(),
});
export type PurgeReply = z.infer<typeof PurgeReplySchema>;

/** A liveness probe (sent when a connection to the peer dropped): the answering process names itself. */
export const PullReplySchema = z.discriminatedUnion("ok", [
  z.object({
    ok: z.literal(true),
    pulls: z.array(PullSchema),
    /** `start` only: whether a new pull was queued (false: the live one of that model came back). */
    created: z.boolean().optional(),
    /** `cancel` only: a finished pull was taken off the list (a live one is cancelled instead). */
    dismissed: z.boolean().optional(),
    /** `locate` only: the store host's node name and API base URL. */
    store_host: z.object({ name: z.string(), api_url: z.string() }).optional(),
  }),
  z.object({ ok: z.literal(false), error: WireErrorSchema }),
]);

export const NodePingRequestSchema = z.object({}).strict();
export const NodePingReplySchema = z.object({ peer_key: z.string(), started_at: z.number() });
export type NodePingReply = z.infer<typeof NodePingReplySchema>;

export const FanoutRequestSchema = z.object({ path: z.string(), query: z.string().optional() });
export const FanoutReplySchema = z.object({
  peer_key: z.string(),
  status: z.number().int(),
  body: z.unknown(),
});

interface Pub<M extends z.ZodType> {
  readonly kind: "publish";
  readonly subject: string;
  readonly message: M;
}
interface Req<M extends z.ZodType, R extends z.ZodType> {
  readonly kind: "request";
  readonly subject: string;
  readonly message: M;
  readonly reply: R;
}

const pub = <M extends z.ZodType>(subject: string, message: M): Pub<M> => ({
  kind: "publish",
  subject,
  message,
});
const req = <M extends z.ZodType, R extends z.ZodType>(
  subject: string,
  message: M,
  reply: R,
): Req<M, R> => ({ kind: "request", subject, message, reply });

export const CATALOG = {
  heartbeat: pub("ic.heartbeat", HeartbeatSchema),
  events: pub("ic.events", IndexedEventSchema),
  masterCommand: req("ic.master.command", CommandRequestSchema, CommandReplySchema),
  masterSync: req("ic.master.sync", SyncRequestSchema, SyncReplySchema),
  /** Broadcast: every node answers with what it deleted. */
  storePurge: req("ic.store.purge", PurgeRequestSchema, PurgeReplySchema),
  /** Per node (suffix: peer key): read a local GET endpoint for cluster-wide views. */
  nodeRead: req("ic.node.read", FanoutRequestSchema, FanoutReplySchema),
  /** Per node (suffix: peer key): "are you there?", after a connection to it dropped. */
  nodePing: req("ic.node.ping", NodePingRequestSchema, NodePingReplySchema),
  /** To the store host (the node with store_path): start, cancel or list model pulls. */
  storePulls: req("ic.store.pulls", PullRequestSchema, PullReplySchema),
  /** Per node (suffix: peer key): the tail of one of its runners' log files. */
  runnerLog: req("ic.node.runner_log", RunnerLogRequestSchema, RunnerLogReplySchema),
  /** Per node (suffix: peer key): save the slot that served a stream, for another node to fetch. */
  kvSave: req("ic.node.kv_save", KvSaveRequestSchema, KvSaveReplySchema),
  /** Per node (suffix: peer key): fetch a saved slot from its node and restore it into a free slot. */
  kvRestore: req("ic.node.kv_restore", KvRestoreRequestSchema, KvRestoreReplySchema),
  /** Broadcast by gateways: a resumable stream started, or was resumed (services/gateway streams/). */
  streams: pub("ic.streams", StreamNoticeSchema),
  /** Broadcast by gateways routing on the prompt caches: the prompts sent to instances. */
  prompts: pub("ic.prompts", PromptNoticesSchema),
} as const;

export type Catalog = typeof CATALOG;
export type PublishName = {
  [K in keyof Catalog]: Catalog[K]["kind"] extends "publish" ? K : never;
}[keyof Catalog];
export type RequestName = {
  [K in keyof Catalog]: Catalog[K]["kind"] extends "request" ? K : never;
}[keyof Catalog];
export type MessageOf<K extends keyof Catalog> = z.output<Catalog[K]["message"]>;
export type MessageIn<K extends keyof Catalog> = z.input<Catalog[K]["message"]>;
export type ReplyOf<K extends RequestName> = z.output<(Catalog[K] & { reply: z.ZodType })["reply"]>;
export type ReplyIn<K extends RequestName> = z.input<(Catalog[K] & { reply: z.ZodType })["reply"]>;
