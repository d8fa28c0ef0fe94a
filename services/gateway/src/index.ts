// Front door of the gateway service: the hono app (it takes the cluster view of @ic/protocol).
export { createGatewayApp, gatewayComponent } from "./app.ts";
export type { GatewayOptions } from "./app.ts";
export { stateDocument } from "./view.ts";
export { RequestLoad } from "./request-load.ts";
export { DEFAULT_CHAT_LIMITS, preciseNow } from "./routes/chat.ts";
export type { ChatLimits } from "./routes/chat.ts";
export { postUpstream } from "./upstream.ts";
export type { UpstreamOptions } from "./upstream.ts";
export { GATEWAY_OPERATIONS } from "./operations.ts";
export { engineAuth } from "./engine-auth.ts";
export { StreamDirectory } from "./streams/directory.ts";
export { PromptCacheMap } from "./prompt-cache.ts";
export { promptBlocks } from "./prompt-blocks.ts";
export { KvMoveStats } from "./chat/handover.ts";
export type { KvMovePort } from "./chat/handover.ts";
export { handOffWarm } from "./chat/warm-handoff.ts";
export type { WarmHandOffResult } from "./chat/warm-handoff.ts";
