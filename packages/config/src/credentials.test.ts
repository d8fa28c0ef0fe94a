import { describe, expect, it } from "vitest";
import { ClusterSecret, clusterCredentials } from "./credentials.ts";

const OLD = "old-secret-0123456789abcdef";
const NEW = "new-secret-fedcba9876543210";

describe("ClusterSecret: a rotation in three reloads", () => {
  it("presents one secret, accepts the other one of an open window, and says what changed", () => {
    const oldToken = clusterCredentials(OLD).nodeToken;
    const newToken = clusterCredentials(NEW).nodeToken;
    const s = new ClusterSecret(OLD);
    expect([s.token(), s.acceptedTokens(), s.windowOpen]).toEqual([oldToken, [oldToken], false]);

    // 1. The window opens: the new secret is accepted, the old one still presented.
    expect(s.set(OLD, NEW)).toEqual({ secret: "unchanged", window: "open" });
    expect([s.token(), s.acceptedTokens()]).toEqual([oldToken, [oldToken, newToken]]);
    // 2. The new one presented, the old one still accepted.
    expect(s.set(NEW, OLD)).toEqual({ secret: "rotated", window: "open" });
    expect([s.token(), s.acceptedTokens()]).toEqual([newToken, [newToken, oldToken]]);
    // 3. The window closes.
    expect(s.set(NEW, undefined)).toEqual({ secret: "unchanged", window: "closed" });
    expect([s.token(), s.acceptedTokens(), s.windowOpen]).toEqual([newToken, [newToken], false]);
    // Undefined keeps the secret presented (a lone node's generated one).
    expect(s.set(undefined, undefined)).toEqual({ secret: "unchanged", window: "closed" });
    expect(s.presents(NEW)).toBe(true);
    expect(s.presents(OLD)).toBe(false);
  });

  it("a heartbeat's proof: accepted under either secret of the window, bound to the peer key", () => {
    const sender = new ClusterSecret(NEW);
    const proof = sender.proof("peer-a");
    expect(proof).toHaveLength(32);
    expect(proof).not.toContain(NEW);
    expect(proof).not.toBe(sender.proof("peer-b"));

    const receiver = new ClusterSecret(OLD);
    expect(receiver.accepts("peer-a", proof)).toBe(false);
    receiver.set(OLD, NEW);
    expect(receiver.accepts("peer-a", proof)).toBe(true);
    // Another peer's proof replayed under this peer key, and garbage of any length: refused.
    expect(receiver.accepts("peer-b", proof)).toBe(false);
    expect(receiver.accepts("peer-a", "x")).toBe(false);
    expect(receiver.accepts("peer-a", proof.slice(0, 31) + (proof.endsWith("A") ? "B" : "A"))).toBe(
      false,
    );
    receiver.set(NEW, undefined);
    expect(receiver.accepts("peer-a", proof)).toBe(true);
    expect(receiver.accepts("peer-a", new ClusterSecret(OLD).proof("peer-a"))).toBe(false);
  });
});
