import { describe, expect, it } from "vitest";
import type { Link } from "@ic/protocol";
import { LinkReport, linksChanged, resolveLinks } from "./link-report.ts";

const l = (peer: string, rtt: number): Link => ({ peer_key: peer, rtt_ms: rtt });
const sent = (...ls: Link[]) => new Map(ls.map((x) => [x.peer_key, x.rtt_ms]));

describe("linksChanged", () => {
  it.each([
    ["the same links", sent(l("a", 1), l("b", 2)), [l("a", 1), l("b", 2)], false],
    ["noise under 0.5 ms on a fast link", sent(l("a", 0.3)), [l("a", 0.79)], false],
    ["more than 0.5 ms on a fast link", sent(l("a", 0.3)), [l("a", 0.81)], true],
    ["under 25% on a slow link", sent(l("a", 20)), [l("a", 24.9)], false],
    ["over 25% on a slow link", sent(l("a", 20)), [l("a", 25.1)], true],
    ["faster beyond the tolerance", sent(l("a", 20)), [l("a", 14.9)], true],
    ["a new peer", sent(l("a", 1)), [l("a", 1), l("b", 1)], true],
    ["a peer gone", sent(l("a", 1), l("b", 1)), [l("a", 1)], true],
    ["another peer, same count", sent(l("a", 1)), [l("b", 1)], true],
    ["none before, none now", sent(), [], false],
  ])("%s -> %s", (_, before, now, changed) => {
    expect(linksChanged(before, now)).toBe(changed);
  });
});

describe("LinkReport", () => {
  it("sends the first heartbeat's links, then only changes and a refresh every n heartbeats", () => {
    const r = new LinkReport(4);
    const seen = [
      r.next([]),
      r.next([l("a", 1)]),
      r.next([l("a", 1.2)]),
      r.next([l("a", 1.1)]),
      r.next([l("a", 1)]),
      r.next([l("a", 1)]),
      r.next([l("a", 3)]),
      r.next([l("a", 3)]),
    ];
    expect(seen).toEqual([
      [],
      [l("a", 1)],
      undefined,
      undefined,
      undefined,
      [l("a", 1)], // 4th heartbeat since the last links: refresh
      [l("a", 3)],
      undefined,
    ]);
  });

  it("a newly heard peer gets the links with the next heartbeat, once", () => {
    const r = new LinkReport(100);
    expect(r.next([l("a", 1)])).toEqual([l("a", 1)]);
    expect(r.next([l("a", 1)])).toBeUndefined();
    r.newPeer();
    expect(r.next([l("a", 1)])).toEqual([l("a", 1)]);
    expect(r.next([l("a", 1)])).toBeUndefined();
  });
});

describe("resolveLinks", () => {
  const known = { started_at: 5, links: [l("x", 2)] };
  it.each([
    ["carried links win", [l("y", 1)], known, 5, [l("y", 1)]],
    ["carried empty links win", [], known, 5, []],
    ["left out: the same process keeps its last", undefined, known, 5, [l("x", 2)]],
    ["left out by a restarted process: none", undefined, known, 6, []],
    ["left out by a peer never heard: none", undefined, undefined, 5, []],
  ])("%s", (_, carried, k, startedAt, want) => {
    expect(resolveLinks(carried, k, startedAt)).toEqual(want);
  });
});
