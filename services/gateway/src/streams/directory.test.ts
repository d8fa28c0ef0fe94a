// The stream directory: one entry per (token, conversation), found only by its token until it
// expires, bounded by age; a resume anywhere reaches the first gateway's watch.
import { describe, expect, it } from "vitest";
import type { CommandId, InstanceId, StreamNotice, StreamStarted } from "@ic/protocol";
import { StreamDirectory } from "./directory.ts";

const started = (conv: string, token: string | null, n = 1): StreamStarted => ({
  type: "started",
  conversation_id: conv,
  token,
  command_id: `chatcmpl-${n}` as CommandId,
  instance_id: `i-${n}` as InstanceId,
  path: "/v1/chat/completions",
  expires_at: 1000,
});

describe("StreamDirectory", () => {
  it("finds a stream by the token that started it, until it expires; announces it to the others", () => {
    const sent: StreamNotice[] = [];
    const d = new StreamDirectory(
      (n) => sent.push(n),
      undefined,
      () => 0,
    );
    d.announce(started("c-1", "app"));
    expect(sent).toEqual([started("c-1", "app")]);
    expect(d.lookup("app", "c-1", 999)?.instance_id).toBe("i-1");
    expect(d.lookup("other", "c-1", 999)).toBeUndefined();
    expect(d.lookup(null, "c-1", 999)).toBeUndefined();
    expect(d.lookup("app", "c-1", 1000)).toBeUndefined();
    expect(d.size).toBe(0);
  });

  it("keeps one stream per token and conversation (the latest), and at most `max`, dropping the oldest", () => {
    const d = new StreamDirectory(undefined, 2, () => 0);
    d.receive(started("c-1", null, 1));
    d.receive(started("c-1", null, 2));
    expect(d.lookup(null, "c-1", 0)?.command_id).toBe("chatcmpl-2");
    d.receive(started("c-2", null, 3));
    d.receive(started("c-3", null, 4));
    expect(d.size).toBe(2);
    expect(d.lookup(null, "c-1", 0)).toBeUndefined();
    expect(d.lookup(null, "c-3", 0)?.command_id).toBe("chatcmpl-4");
  });

  it("drops expired streams from the oldest end as notices come, a few per notice", () => {
    let now = 0;
    const d = new StreamDirectory(undefined, 100, () => now);
    const at = (conv: string, expires_at: number) => ({ ...started(conv, null), expires_at });
    for (let i = 0; i < 10; i++) d.receive(at(`old-${i}`, 1000));
    d.receive(at("late", 5000));
    expect(d.size).toBe(11);
    now = 1000;
    d.receive(at("new-1", 9000));
    // 8 of the 10 expired ones go with this notice, the other 2 with the next.
    expect(d.size).toBe(4);
    d.receive(at("new-2", 9000));
    expect(d.size).toBe(3);
    expect(d.lookup(null, "late", now)?.conversation_id).toBe("late");
    // It stops at the first live entry: one that expires before a younger one waits for a lookup.
    d.receive(at("short", 2000));
    now = 3000;
    d.receive(at("new-3", 9000));
    expect(d.size).toBe(5);
    expect(d.lookup(null, "short", now)).toBeUndefined();
    expect(d.size).toBe(4);
  });

  it("tells the first gateway's watch when the stream is read again, from here or from another node", () => {
    const sent: StreamNotice[] = [];
    const d = new StreamDirectory((n) => sent.push(n));
    let calls = 0;
    d.onResumed("chatcmpl-1", () => calls++);
    d.receive({ type: "resumed", command_id: "chatcmpl-1" as CommandId });
    d.receive({ type: "resumed", command_id: "chatcmpl-1" as CommandId });
    expect(calls).toBe(1);
    const off = d.onResumed("chatcmpl-2", () => calls++);
    off();
    d.resumed("chatcmpl-2");
    expect(calls).toBe(1);
    expect(sent).toEqual([{ type: "resumed", command_id: "chatcmpl-2" }]);
  });
});
