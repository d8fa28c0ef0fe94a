// The chat path's observable events: what happened to one request, in order. The gateway emits
// them; tracing and metrics subscribe (so they depend on this package, not on the gateway).
import type { ErrorCode } from "./errors.ts";
import type { TaskId } from "./ids.ts";

/** llama-server's `timings` of one completion (ms and token counts). */
export interface EngineTimings {
  readonly cache_n?: number;
  readonly prompt_n?: number;
  readonly prompt_ms?: number;
  readonly predicted_n?: number;
  readonly predicted_ms?: number;
  readonly draft_n?: number;
  readonly draft_n_accepted?: number;
}

/** One chat request's life, in order. `at` is a wall-clock time in ms with sub-ms precision. */
export type ChatEvent =
  /** `token`: the name of the API token the request presented (absent: anonymous). */
  | { type: "validated"; at: number; model: string; stream: boolean; token?: string | undefined }
  | { type: "routed"; at: number; instanceId: string; nodeId: string | undefined; endpoint: string }
  /** The instance of the last `routed` was lost before the client got a byte; routed again next. */
  | { type: "retry"; at: number; code: ErrorCode; instanceId: string }
  /** The request reached the engine's socket (connect done). */
  | { type: "sent"; at: number }
  | { type: "task"; at: number; taskId: TaskId }
  | { type: "headers"; at: number; status: number }
  | { type: "first_chunk"; at: number }
  | {
      type: "engine";
      at: number;
      timings: EngineTimings;
      usage: { prompt_tokens?: number; completion_tokens?: number } | undefined;
    }
  | {
      type: "end";
      at: number;
      ok: boolean;
      status: number;
      code: ErrorCode | undefined;
      message: string | undefined;
    };

/** A request as it arrives on an inference endpoint: what an observer is made for. */
export interface ChatRequestSeen {
  readonly commandId: string;
  readonly receivedAt: number;
  /** The endpoint's path (one of the gateway's: a bounded set, usable as a metric label). */
  readonly path: string;
}

export interface ChatObserver {
  event(e: ChatEvent): void;
}
