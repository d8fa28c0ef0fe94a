// The master role's two bus endpoints for a session: commands (`masterCommand`, answered only for the
// node a command names, from that node's own connection) and catch-up (`masterSync`). A master that
// hands its session off keeps them open a while (HANDOFF_GRACE_MS) for followers that asked it late.
import type { Bus, Unsubscribe } from "@ic/bus";
import type {
  Command,
  CommandReply,
  ControlState,
  NodeId,
  ReplyOf,
  SessionId,
  MessageOf,
} from "@ic/protocol";

/** After a hand-off, the old master answers late askers this long, naming the successor. */
export const HANDOFF_GRACE_MS = 10_000;

/** What the endpoints ask of the agent. */
export interface MasterEndpointsPort {
  /** The replica's members (a command must come from the connection of the node it names). */
  members(): ControlState["members"];
  originOf(peerKey: string): string | undefined;
  refuse(what: string, origin: string | undefined, why: string): void;
  /** The session this node is in now. */
  sessionId(): SessionId | null;
  command(session: SessionId, from: NodeId, cmd: Command): CommandReply | Promise<CommandReply>;
  sync(req: MessageOf<"masterSync">): ReplyOf<"masterSync">;
}

export class MasterEndpoints {
  private open: Unsubscribe[] = [];
  /** After a hand-off, the old master's endpoints, kept HANDOFF_GRACE_MS for late askers. */
  private retired: { subs: Unsubscribe[]; timer: NodeJS.Timeout } | undefined;

  constructor(
    private readonly bus: Pick<Bus, "respond">,
    private readonly port: MasterEndpointsPort,
  ) {}

  /** Answers the session's commands and sync requests (a master stint begins). */
  serve(sessionId: SessionId): void {
    this.close();
    this.closeRetired();
    const p = this.port;
    this.open.push(
      this.bus.respond(
        "masterCommand",
        (req, meta) => {
          // A command speaks for the node it names only when it comes from that node's connection.
          const member = p.members()[req.from_node_id];
          if (member && meta.origin !== p.originOf(member.peer_key)) {
            p.refuse("command", meta.origin, `command as ${req.from_node_id}`);
            return {
              ok: false as const,
              error: {
                code: "forbidden" as const,
                message: "a command must come from the node it names",
              },
            };
          }
          return p.command(req.session_id, req.from_node_id, req.command);
        },
        { suffix: sessionId },
      ),
      this.bus.respond(
        "masterSync",
        (req) => {
          if (req.session_id !== p.sessionId())
            return {
              ok: false as const,
              error: { code: "session_changed" as const, message: "session changed" },
            };
          return p.sync(req);
        },
        { suffix: sessionId },
      ),
    );
  }

  /** Stops answering at once (a step-down, a stop). */
  close(): void {
    for (const u of this.open) u();
    this.open = [];
  }

  /** After a hand-off: keeps answering late askers for HANDOFF_GRACE_MS, then stops. */
  retire(): void {
    this.closeRetired();
    this.retired = {
      subs: this.open,
      timer: setTimeout(() => this.closeRetired(), HANDOFF_GRACE_MS),
    };
    this.open = [];
  }

  /** The endpoints kept after a hand-off go now. */
  closeRetired(): void {
    if (!this.retired) return;
    clearTimeout(this.retired.timer);
    for (const u of this.retired.subs) u();
    this.retired = undefined;
  }
}
