// How many slots each engine the prompt-cache map models has, asked of the engine (llama-server's
// GET /props, `total_slots`) the first time a request is routed to it on the caches: the map's floor
// on how many prompts an instance keeps (prompt-cache.ts `slots`). In the background, never on a
// request's path. An engine that does not say (no /props, an error, a stand-in) is asked again after
// RETRY_MS, and the map learns without a floor meanwhile.
import { z } from "zod";
import { postUpstream, readAll, UpstreamAbort } from "./upstream.ts";
import type { PromptCacheMap } from "./prompt-cache.ts";

/** How long after an engine did not say before it is asked again. */
export const RETRY_MS = 60_000;
/** How long an engine has to answer GET /props. */
const ANSWER_MS = 10_000;
/** The instances remembered as asked, at most (deleted instances are never asked again). */
const MAX_ASKED = 1024;

const PropsSchema = z.object({ total_slots: z.number().int().positive() });

export interface EngineSlotsOptions {
  readonly cache: Pick<PromptCacheMap, "slots" | "knowsSlots">;
  /** The engine's API key header, as the chat path sends it. */
  readonly headers?: ((instanceId: string) => Record<string, string>) | undefined;
  readonly connectTimeoutMs: number;
  readonly now?: () => number;
}

export class EngineSlots {
  /** When each instance's engine was last asked (ms). */
  private readonly asked = new Map<string, number>();

  constructor(private readonly o: EngineSlotsOptions) {}

  /** Asks the engine at `endpoint` its slot count, unless known or asked within RETRY_MS. */
  ask(instanceId: string, endpoint: string): void {
    if (this.o.cache.knowsSlots(instanceId)) return;
    const now = (this.o.now ?? Date.now)();
    const at = this.asked.get(instanceId);
    if (at !== undefined && now - at < RETRY_MS) return;
    if (this.asked.size >= MAX_ASKED) this.asked.clear();
    this.asked.set(instanceId, now);
    void this.props(instanceId, endpoint).then(
      (n) => n !== undefined && this.o.cache.slots(instanceId, n),
    );
  }

  /**
   * The engine's `total_slots`, or undefined when it does not answer with one within ANSWER_MS (an
   * engine that takes a request and never answers holds no socket past that).
   */
  private async props(instanceId: string, endpoint: string): Promise<number | undefined> {
    const abort = new UpstreamAbort();
    const timer = setTimeout(() => abort.abort(new Error("no answer")), ANSWER_MS);
    try {
      const res = await postUpstream(`${endpoint}/props`, "", {
        method: "GET",
        abort,
        headers: this.o.headers?.(instanceId),
        connectTimeoutMs: this.o.connectTimeoutMs,
      });
      const body = await readAll(res);
      if (res.statusCode !== 200) return undefined;
      const parsed = PropsSchema.safeParse(JSON.parse(body.toString()));
      return parsed.success ? parsed.data.total_slots : undefined;
    } catch {
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  }
}
