// The agent's in-process event stream: what its parts tell each other, typed by topic (as exo's
// typed channels). The replica publishes each event it applied and each snapshot it installed; the
// agent publishes its session changes, and the heartbeats and the event receiver what the election
// must look at now. Membership, the sequencer, the agent's role changes and the
// node's listeners each subscribe to the topics they need. Delivery is synchronous, in the order of
// subscription, so an event is whole everywhere before the next one is applied.
import type { ControlState, IndexedEvent, SessionId } from "@ic/protocol";

export interface StreamTopics {
  /** An event the replica applied, the state after it, and the peer a NodeLeft took out. */
  readonly applied: {
    readonly ev: IndexedEvent;
    readonly state: ControlState;
    readonly left: string | undefined;
  };
  /** The replica was replaced by the master's snapshot (compacted history). */
  readonly snapshot: ControlState;
  /** The session this node is in changed (`previous` is null on the first join). */
  readonly session: { readonly previous: SessionId | null; readonly next: SessionId };
  /**
   * A peer heard for the first time, a peer newly saying it is master, or another master's session
   * announced: the election looks again at once instead of at its next tick.
   */
  readonly heard: { readonly peerKey: string };
}

type Topic = keyof StreamTopics;
type Handler<K extends Topic> = (message: StreamTopics[K]) => void;

export class AgentStream {
  private readonly handlers: { [K in Topic]: Set<Handler<K>> } = {
    applied: new Set(),
    snapshot: new Set(),
    session: new Set(),
    heard: new Set(),
  };

  /** Returns the unsubscribe. */
  subscribe<K extends Topic>(topic: K, handler: Handler<K>): () => void {
    const set = this.handlers[topic] as Set<Handler<K>>;
    set.add(handler);
    return () => set.delete(handler);
  }

  publish<K extends Topic>(topic: K, message: StreamTopics[K]): void {
    for (const h of this.handlers[topic] as Set<Handler<K>>) h(message);
  }
}
