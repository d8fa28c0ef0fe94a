// A node's side of a command: it goes to the master of this node's session (over the bus, or straight
// to the sequencer when this node is the master), once the master has said so in a heartbeat; a
// hand-off is followed once; the master's typed refusal comes back as a ServiceError.
import type { Bus } from "@ic/bus";
import { fromWireError, ServiceError } from "@ic/protocol";
import type { Clock, Command, CommandReply } from "@ic/protocol";
import { nodeIdFor } from "@ic/state";
import type { MasterRole } from "./master-role.ts";
import type { PeerView } from "./membership.ts";
import type { Replica } from "./replica.ts";
import type { Roles } from "./roles.ts";

export interface CommandClientOptions {
  /** The session this node is in, its master, and whether this node is it. */
  readonly roles: Readonly<Pick<Roles, "current" | "isMaster" | "stopped">>;
  /** A command waits until this node's replica holds its session's state. */
  readonly replica: Pick<Replica, "synced">;
  /** The master's heartbeat and connection (membership.ts). */
  readonly peers: {
    get(peerKey: string): PeerView | undefined;
    originOf(peerKey: string): string | undefined;
  };
  /** The master's own handling of a command, when this node is the master (master-role.ts). */
  readonly master: Pick<MasterRole, "command">;
  readonly selfKey: string;
  readonly bus: Pick<Bus, "request">;
  readonly clock: Pick<Clock, "now">;
  readonly commandTimeoutMs?: number | undefined;
}

/** Commands that may change intent: the master answers them once the intent store has them. */
const INTENT_COMMANDS: ReadonlySet<Command["type"]> = new Set([
  "PlaceInstance",
  "DeleteInstance",
  "LoadModel",
  "UnloadInstance",
  "ScaleReplicas",
  "RegisterModel",
  "DeregisterModel",
]);

export class CommandClient {
  constructor(private readonly o: CommandClientOptions) {}

  /** Sends a command to this session's master; throws ServiceError (session_changed, no_master, ...). */
  async send(cmd: Command): Promise<Extract<CommandReply, { ok: true }>> {
    const session = this.o.roles.current?.session_id;
    const deadline = this.o.clock.now() + (this.o.commandTimeoutMs ?? 5000);
    let followed = false;
    for (;;) {
      await this.untilMasterSpeaks(deadline);
      try {
        return await this.commandOnce(cmd, deadline);
      } catch (e) {
        const late = () =>
          this.o.roles.stopped ||
          this.o.roles.current?.session_id !== session ||
          this.o.clock.now() > deadline;
        // The master handed the session off (a planned stop): once this replica has the hand-off
        // (bounded), the command goes to the successor. Only once: a second hand-off is new.
        const to = e instanceof ServiceError ? e.details?.handed_off_to : undefined;
        if (typeof to === "string" && !followed) {
          followed = true;
          while (
            this.o.roles.current?.master.peer_key !== to ||
            (to === this.o.selfKey && !this.o.roles.isMaster)
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
      const cur = this.o.roles.current;
      if (!cur || this.o.roles.isMaster || this.o.roles.stopped) return;
      const hb = this.o.peers.get(cur.master.peer_key)?.heartbeat;
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
    const cur = this.o.roles.current;
    if (!cur || !this.o.replica.synced)
      throw new ServiceError("no_master", "this node has not joined a cluster session yet");
    const from = nodeIdFor(cur.session_id, this.o.selfKey);
    let reply: CommandReply;
    if (this.o.roles.isMaster) {
      reply = await this.o.master.command(cur.session_id, from, cmd);
    } else {
      try {
        const masterOrigin = this.o.peers.originOf(cur.master.peer_key);
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
        if (this.o.roles.current?.session_id !== cur.session_id) {
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
