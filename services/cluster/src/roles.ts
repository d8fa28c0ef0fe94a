// Which role this node plays in which session. The agent alone writes it (its election and role
// changes); the parts read it through the ports their own files declare.
import type { SessionId } from "@ic/protocol";
import type { Peer } from "@ic/state";

/** A session and its master. */
export interface SessionRef {
  readonly session_id: SessionId;
  readonly master: Peer;
}

export class Roles {
  role: "follower" | "master" = "follower";
  /** The session this node has joined (or is joining), and its master. */
  current: SessionRef | null = null;
  /** The node is stopping: no part starts anything new. */
  stopped = false;

  get isMaster(): boolean {
    return this.role === "master";
  }

  /** Whether this node is the master of `session` now. */
  masters(session: SessionId): boolean {
    return this.isMaster && this.current?.session_id === session;
  }

  /** The session this node masters, unless it is stopping. */
  mastering(): SessionId | undefined {
    return this.isMaster && !this.stopped ? this.current?.session_id : undefined;
  }
}
