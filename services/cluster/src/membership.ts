// Membership and liveness: the peers this node has heard, each pinned to the bus connection its first
// heartbeat came from, when each was last heard, and which are known gone (a dropped connection and
// no answer to the liveness probes). The election, the master's joins and departures and every
// cluster-wide view read it; the rules that decide from it are pure (@ic/state's elect).
import type { Bus } from "@ic/bus";
import type { Logger } from "@ic/log";
import type { Clock, Heartbeat, HeartbeatMessage } from "@ic/protocol";
import type { HeardPeer } from "@ic/state";
import { resolveLinks } from "./link-report.ts";
import type { AgentStream } from "./stream.ts";

export interface PeerView {
  readonly heartbeat: Heartbeat;
  readonly lastHeard: number;
  /**
   * The bus connection the peer's first heartbeat came from. A peer is pinned to it: messages that
   * claim to be this peer's but come from another connection are ignored.
   */
  readonly origin: string | undefined;
  /**
   * Set when a connection to the peer dropped and it then failed every liveness probe: it counts as
   * silent from then on (election, liveness, membership) until it is heard again.
   */
  readonly lostAt?: number;
}

/** When a peer was last heard, for every liveness rule: never, once it is known to be gone. */
export function heardAt(p: PeerView): number {
  return p.lostAt === undefined ? p.lastHeard : Number.NEGATIVE_INFINITY;
}

/** Probing a peer after a connection to it dropped (see `Membership.connectionLost`). */
export interface ProbeSettings {
  /** Requests sent before the peer is declared gone. */
  readonly tries: number;
  /** Deadline of one request. */
  readonly timeoutMs: number;
  /** Pause after a request failed at once ("no responder") before the next try. */
  readonly gapMs: number;
}

export const DEFAULT_PROBE: ProbeSettings = { tries: 3, timeoutMs: 300, gapMs: 100 };

export interface MembershipOptions {
  readonly selfKey: string;
  readonly bus: Pick<Bus, "origin" | "request">;
  readonly clock: Pick<Clock, "now">;
  readonly livenessTimeoutMs: number;
  readonly probe?: ProbeSettings | undefined;
  readonly log: Logger;
  /** The replica's applied events: a peer the master declared gone (NodeLeft) counts as gone here. */
  readonly stream: Pick<AgentStream, "subscribe">;
}

export class Membership {
  private readonly peers = new Map<string, PeerView>();
  private readonly refusedAt = new Map<string, number>();
  private readonly probing = new Set<string>();

  constructor(private readonly o: MembershipOptions) {
    // Until it is heard again: an election right after must not carry it into the new session.
    o.stream.subscribe("applied", ({ left }) => {
      if (left !== undefined && left !== o.selfKey) this.markLost(left);
    });
  }

  /** A peer as last heard, by its peer key (self included; live or not). */
  get(peerKey: string): PeerView | undefined {
    return this.peers.get(peerKey);
  }

  has(peerKey: string): boolean {
    return this.peers.has(peerKey);
  }

  /** This node's own heartbeat, as it sends it (it hears itself at once). */
  own(hb: Heartbeat): void {
    this.peers.set(hb.peer_key, {
      heartbeat: hb,
      lastHeard: this.o.clock.now(),
      origin: this.o.bus.origin,
    });
  }

  /**
   * A peer's heartbeat. Refused (undefined) when it claims a peer pinned to another connection;
   * otherwise the view before it (`known`) and the heartbeat with its links filled in.
   */
  heard(
    msg: HeartbeatMessage,
    origin: string | undefined,
  ): { known: PeerView | undefined; hb: Heartbeat } | undefined {
    const known = this.peers.get(msg.peer_key);
    if (origin === undefined || (known && known.origin !== origin)) {
      this.refuse("heartbeat", origin, `claims peer ${msg.peer_key} from another connection`);
      return undefined;
    }
    const hb: Heartbeat = {
      ...msg,
      links: resolveLinks(msg.links, known?.heartbeat, msg.started_at),
    };
    this.peers.set(hb.peer_key, { heartbeat: hb, lastHeard: this.o.clock.now(), origin });
    return { known, hb };
  }

  /** The bus origin of a peer, as pinned by its heartbeats (self: this node's own). */
  originOf(peerKey: string): string | undefined {
    return peerKey === this.o.selfKey ? this.o.bus.origin : this.peers.get(peerKey)?.origin;
  }

  /** Logs a refused message once a minute per kind and sender (a rogue sender may repeat fast). */
  refuse(what: string, origin: string | undefined, why: string): void {
    const key = `${what} ${origin ?? "?"}`;
    const now = this.o.clock.now();
    if (now - (this.refusedAt.get(key) ?? -Infinity) < 60_000) return;
    this.refusedAt.set(key, now);
    if (this.refusedAt.size > 1000) this.refusedAt.clear();
    this.o.log.warn(
      { what, origin, why },
      "ignored a bus message from a connection not entitled to it",
    );
  }

  /** Any traffic from a peer is a liveness signal (ordinary telemetry, indexed events). */
  touch(peerKey: string): void {
    const p = this.peers.get(peerKey);
    if (p)
      this.peers.set(peerKey, {
        heartbeat: p.heartbeat,
        origin: p.origin,
        lastHeard: this.o.clock.now(),
      });
  }

  /**
   * A master's session announcement counts as its heartbeat saying it is that session's master (so
   * the election rule can adopt it at once). False when the master was never heard.
   */
  announcedMaster(peerKey: string, sessionId: Heartbeat["session_id"]): boolean {
    const known = this.peers.get(peerKey);
    if (!known) return false;
    this.peers.set(peerKey, {
      origin: known.origin,
      lastHeard: this.o.clock.now(),
      heartbeat: { ...known.heartbeat, is_master: true, session_id: sessionId },
    });
    return true;
  }

  /** Counts a peer as gone until it is heard again (the master declared it left). */
  markLost(peerKey: string): void {
    const p = this.peers.get(peerKey);
    if (p && p.lostAt === undefined) this.peers.set(peerKey, { ...p, lostAt: this.o.clock.now() });
  }

  /** Peers heard within the liveness timeout, self included. */
  live(): PeerView[] {
    const now = this.o.clock.now();
    return [...this.peers.values()].filter((p) => now - heardAt(p) <= this.o.livenessTimeoutMs);
  }

  all(): IterableIterator<PeerView> {
    return this.peers.values();
  }

  /** The other peers as the election rule reads them. */
  heardPeers(): HeardPeer[] {
    const out: HeardPeer[] = [];
    for (const [key, p] of this.peers) {
      if (key === this.o.selfKey) continue;
      out.push({
        peer_key: key,
        started_at: p.heartbeat.started_at,
        lastHeard: heardAt(p),
        masterOf: p.heartbeat.is_master ? p.heartbeat.session_id : null,
        session: p.heartbeat.session_id,
      });
    }
    return out;
  }

  /** Forgets peers silent for long (keeps the table bounded; they rejoin by heartbeat). */
  forgetSilent(now: number): void {
    for (const [k, p] of this.peers)
      if (now - p.lastHeard > this.o.livenessTimeoutMs * 10) this.peers.delete(k);
  }

  /**
   * A connection to a peer dropped (its watch connection, see peer-watch). A killed process's
   * sockets close at once, long before its heartbeats are missed, so this is the fast failure
   * signal; a cut network or a frozen host closes nothing and is still caught by the timeouts.
   * The drop alone proves nothing (the peer may have restarted its listener), so the peer is asked
   * over the bus, a few times with a short deadline; only when no try reaches the same process
   * (the same peer key and start time) is it marked gone. Resolves to true when it was.
   */
  async connectionLost(
    peerKey: string,
    startedAt: number | undefined,
    via: string,
    stopped: () => boolean,
  ): Promise<boolean> {
    const p = this.peers.get(peerKey);
    if (stopped() || peerKey === this.o.selfKey || !p || p.lostAt !== undefined) return false;
    if (startedAt !== undefined && p.heartbeat.started_at !== startedAt) return false;
    if (this.probing.has(peerKey)) return false;
    this.probing.add(peerKey);
    try {
      const failures = await this.probe(peerKey, p, via, stopped);
      if (failures === undefined) return false;
      // Marked gone; any later heartbeat of the same process clears the mark (heard() replaces the
      // view), so a peer that was only out of reach comes back as usual. What it sent before it
      // died arrived long before the last probe failed.
      const cur = this.peers.get(peerKey);
      if (stopped() || !cur) return false;
      this.peers.set(peerKey, { ...cur, lostAt: this.o.clock.now() });
      this.o.log.warn(
        { peer: p.heartbeat.name, peer_key: peerKey, via, probes: failures },
        "peer gone: its connection dropped and it answers no probe",
      );
      return true;
    } finally {
      this.probing.delete(peerKey);
    }
  }

  /** The probes' failures, or undefined when the same process answered one. */
  private async probe(
    peerKey: string,
    p: PeerView,
    via: string,
    stopped: () => boolean,
  ): Promise<string[] | undefined> {
    const probe = this.o.probe ?? DEFAULT_PROBE;
    const failures: string[] = [];
    for (let i = 0; i < probe.tries && !stopped(); i++) {
      const sent = this.o.clock.now();
      try {
        const r = await this.o.bus.request(
          "nodePing",
          {},
          { suffix: peerKey, timeoutMs: probe.timeoutMs },
        );
        if (r.peer_key === peerKey && r.started_at === p.heartbeat.started_at) {
          this.o.log.info(
            { peer: p.heartbeat.name, via },
            "connection to a peer dropped; it answers",
          );
          return undefined;
        }
        failures.push(`another process answered (started ${r.started_at})`);
      } catch (e) {
        failures.push(e instanceof Error ? e.message : String(e));
      }
      // A fast failure ("no responder") is retried after a pause; a timeout already waited.
      const waited = this.o.clock.now() - sent;
      if (i + 1 < probe.tries && waited < probe.gapMs)
        await new Promise((r) => setTimeout(r, probe.gapMs - waited));
    }
    return failures;
  }
}
