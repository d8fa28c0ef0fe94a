// A resumable stream on its engine: llama-server keeps it under the command id (its
// X-Conversation-Id, tools/server/server-stream.h), reads it again from a byte offset (GET
// /v1/stream) and stops it (DELETE /v1/stream). The gateway's one way to ask for either; what the
// client sees is the routes' (routes/resume.ts) and the chat path's (chat/leg.ts) business.
import type { IncomingMessage } from "node:http";
import { postUpstream } from "../upstream.ts";
import type { ChatContext } from "../chat/request.ts";

/** Which engine keeps the stream, under which id. */
export interface EngineStream {
  /** The engine's base URL. */
  readonly endpoint: string;
  readonly instanceId: string;
  readonly commandId: string;
}

/** GET (read again from byte `from`) or DELETE (stop) the stream on its engine. */
export function engineStreamCall(
  ctx: Pick<ChatContext, "o" | "limits">,
  s: EngineStream,
  ask: ({ readonly method: "GET" } & { readonly from: number }) | { readonly method: "DELETE" },
): Promise<IncomingMessage> {
  const from = ask.method === "GET" ? `&from=${ask.from}` : "";
  return postUpstream(
    `${s.endpoint}/v1/stream?conv_id=${encodeURIComponent(s.commandId)}${from}`,
    "",
    {
      method: ask.method,
      headers: ctx.o.engineHeaders?.(s.instanceId),
      connectTimeoutMs: ctx.limits.connect_timeout_ms,
    },
  );
}
