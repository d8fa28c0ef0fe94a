// A node's side of a command: it goes to the master of this node's session (over the bus, or straight
// to the sequencer when this node is the master), once the master has said so in a heartbeat; a
// hand-off is followed once; the master's typed refusal comes back as a ServiceError.
import type { Bus } from "@ic/bus";
import { fromWireError, ServiceError } from "@ic/protocol";
import type { Clock, Command, CommandReply, NodeId, SessionId } from "@ic/protocol";
import { nodeIdFor } from "@ic/state";
import type { Peer } from "@ic/state";
import type { PeerView } from "./membership.ts";

/** What the command client asks of the agent. */
export interface CommandAgent {
  current(): { readonly session_id: SessionId; readonly master: Peer } | null;
  isMaster(): boolean;
  synced(): boolean;
  stopped(): boolean;
  peer(peerKey: string): PeerView | undefined;
  originOf(peerKey: string): string | undefined;
  /** The master's own handling of a command (this node is the master). */
  handle(session: SessionId, from: NodeId, cmd: Command): CommandReply | Promise<CommandReply>;
}

export interface CommandClientOptions {
  readonly agent: CommandAgent;
  readonly selfKey: string;
  readonly bus: Pick<Bus, "request">;
  readonly clock: Pick<Clock, "now">;
  readonly commandTimeoutMs?: number | undefined;
}

/** Commands that may change intent: the master answers them once the intent store has them. */
const INTENT_COMMANDS: ReadonlySet<Command["type"]> = new Set([
  "PlaceInstance",
  "DeleteInstance",
  "RegisterModel",
  "DeregisterModel",
]);

export class CommandClient {
  private readonly a: CommandAgent;

  constructor(private readonly o: CommandClientOptions) {
    this.a = o.agent;
  }

  /** Sends a command to this session's master; throws ServiceError (session_changed, no_master, ...). */
  async send(cmd: Command): Promise<Extract<CommandReply, { ok: true }>> {
    const session = this.a.current()?.session_id;
    const deadline = this.o.clock.now() + (this.o.commandTimeoutMs ?? 5000);
    let followed = false;
    for (;;) {
      await this.untilMasterSpeaks(deadline);
      try {
        return await this.commandOnce(cmd, deadline);
      } catch (e) {
        const late = () =>
          this.a.stopped() ||
          this.a.current()?.session_id !== session ||
          this.o.clock.now() > deadline;
        // The master handed the session off (a planned stop): once this replica has the hand-off
        // (bounded), the command goes to the successor. Only once: a second hand-off is new.
        const to = e instanceof ServiceError ? e.details?.handed_off_to : undefined;
        if (typeof to === "string" && !followed) {
          followed = true;
          while (
            this.a.current()?.master.peer_key !== to ||
            (to === this.o.selfKey && !this.a.isMaster())
          ) {
            if (late()) throw e;
            await new Promise((r) => setTimeout(r, 10));
          }
          continue;
        }
        throw e;
      }
    }
  }

  /**
   * Waits (until `deadline`) for the master this replica follows to have said it is the master in a
   * heartbeat. A master publishes that heartbeat after it subscribed to commands, and nats-server
   * forwards a subscription's interest to its routes ahead of the messages that connection publishes
   * next; so once the heartbeat is here, a command reaches the master. Before it (right after a
   * hand-off, or an election) a command could go out before the new master's interest reached this
   * node's server, be dropped, and wait its whole timeout for a reply from the expected responder.
   */
  private async untilMasterSpeaks(deadline: number): Promise<void> {
    for (;;) {
      const cur = this.a.current();
      if (!cur || this.a.isMaster() || this.a.stopped()) return;
      const hb = this.a.peer(cur.master.peer_key)?.heartbeat;
      if (hb?.is_master && hb.session_id === cur.session_id) return;
      if (this.o.clock.now() >= deadline) return;
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** One try; a task command waits for its reply only what is left of `deadline` (at least 500 ms). */
  private async commandOnce(
    cmd: Command,
    deadline: number,
  ): Promise<Extract<CommandReply, { ok: true }>> {
    const cur = this.a.current();
    if (!cur || !this.a.synced())
      throw new ServiceError("no_master", "this node has not joined a cluster session yet");
    const from = nodeIdFor(cur.session_id, this.o.selfKey);
    let reply: CommandReply;
    if (this.a.isMaster()) {
      reply = await this.a.handle(cur.session_id, from, cmd);
    } else {
      try {
        const masterOrigin = this.a.originOf(cur.master.peer_key);
        if (masterOrigin === undefined) throw new Error("the master has not been heard yet");
        reply = await this.o.bus.request(
          "masterCommand",
          { session_id: cur.session_id, from_node_id: from, command: cmd },
          {
            // An intent change waits for the intent store's quorum (and for the changes ahead).
            // Others wait what is left of the command's deadline: a wait for the master's
            // heartbeat (untilMasterSpeaks) does not add to how long a command may take.
            timeoutMs: INTENT_COMMANDS.has(cmd.type)
              ? Math.max(15_000, this.o.commandTimeoutMs ?? 5000)
              : Math.max(500, deadline - this.o.clock.now()),
            suffix: cur.session_id,
            from: masterOrigin,
          },
        );
      } catch (e) {
        if (this.a.current()?.session_id !== cur.session_id) {
          throw new ServiceError(
            "session_changed",
            "the cluster session changed; retry the request",
            { cause: e },
          );
        }
        throw new ServiceError(
          "no_master",
          "the master did not answer; an election may be in progress, retry",
          { cause: e },
        );
      }
    }
    if (!reply.ok) throw fromWireError(reply.error);
    return reply;
  }
}
