import { describe, expect, it } from "vitest";
import { Writable } from "node:stream";
import { createLogger } from "@ic/log";
import { SecurityHealth } from "./security-health.ts";

function logCapture() {
  const lines: { level: number; msg: string }[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split("\n"))
        if (l) lines.push(JSON.parse(l) as { level: number; msg: string });
      cb();
    },
  });
  const log = createLogger({ enabled: true, level: "debug", destination });
  return { log, lines };
}

describe("SecurityHealth", () => {
  it("a refused route is one error log line per peer and window, and an error nodeHealth entry", () => {
    let now = 1000;
    const { log, lines } = logCapture();
    const h = new SecurityHealth({ log, now: () => now, windowMs: 10_000 });
    for (let i = 0; i < 5; i++) {
      h.record({ direction: "route-refused-by-peer", remote: "10.0.0.2:6222", at: now });
      now += 1000;
    }
    expect(lines.filter((l) => l.level === 50)).toHaveLength(1);
    expect(lines[0]!.msg).toMatch(/refused this node's cluster secret; this node cannot join/);
    const [e] = h.entries();
    expect(e).toMatchObject({ code: "cluster_secret_rejected", severity: "error" });
    expect(e!.message).toContain("10.0.0.2:6222");
    expect(e!.remediation).toMatch(/cluster\.secret_file/);
    // The entry lapses once the refusals stop for a window.
    now += 11_000;
    expect(h.entries()).toEqual([]);
  });

  it("a refusal while other peers accept this node names the refusing peer, as a warning", () => {
    const { log } = logCapture();
    const h = new SecurityHealth({ log, now: () => 0 });
    h.record({ direction: "route-refused-by-peer", remote: "10.0.0.4:6222", at: 0 });
    expect(h.entries(2)).toEqual([
      expect.objectContaining({
        code: "bus_auth_failures",
        severity: "warn",
        message: expect.stringMatching(
          /10\.0\.0\.4:6222 refuse\(s\).*while 2 other node\(s\) accept/,
        ) as unknown,
      }),
    ]);
    // Alone, the same refusal means this node has the wrong secret.
    expect(h.entries(0)[0]).toMatchObject({ code: "cluster_secret_rejected", severity: "error" });
  });

  it("strangers refused on the bus are a warning that counts them by address", () => {
    const now = 1000;
    const { log } = logCapture();
    const h = new SecurityHealth({ log, now: () => now });
    h.record({ direction: "route-rejected", remote: "10.0.0.9:40000", at: now });
    h.record({ direction: "route-rejected", remote: "10.0.0.9:40000", at: now });
    h.record({ direction: "client-rejected", remote: "127.0.0.1:5000", at: now });
    const [e] = h.entries();
    expect(e).toMatchObject({ code: "bus_auth_failures", severity: "warn" });
    expect(e!.message).toMatch(/3 refused login\(s\) from 10\.0\.0\.9, 127\.0\.0\.1/);
  });

  it("an anonymous API beyond loopback is a standing warning with remediation", () => {
    const { log } = logCapture();
    const h = new SecurityHealth({ log, now: () => 0, anonymousApi: { bind: "0.0.0.0" } });
    expect(h.entries()).toEqual([
      expect.objectContaining({
        code: "anonymous_api",
        severity: "warn",
        remediation: expect.stringMatching(/auth\.tokens/) as unknown,
      }),
    ]);
  });

  it("failed route TLS handshakes: a warning naming the peers while others accept, an error alone", () => {
    const { log, lines } = logCapture();
    const h = new SecurityHealth({ log, now: () => 0 });
    h.record({ direction: "route-tls-failed", remote: "10.0.0.4:6222", at: 0 });
    h.record({ direction: "route-tls-failed", remote: "10.0.0.4:41000", at: 0 });
    expect(lines[0]!.msg).toMatch(/failed its TLS handshake/);
    expect(h.entries(2)).toEqual([
      expect.objectContaining({
        code: "bus_tls_failures",
        severity: "warn",
        message: expect.stringMatching(/2 failed TLS handshake\(s\) with 10\.0\.0\.4$/) as unknown,
      }),
    ]);
    expect(h.entries(0)).toEqual([
      expect.objectContaining({
        code: "cluster_tls_rejected",
        severity: "error",
        remediation: expect.stringMatching(/tls\.ca_file/) as unknown,
      }),
    ]);
  });

  it("plaintext beyond loopback is a standing warning; an engine without TLS on a TLS node an error", () => {
    const { log } = logCapture();
    const h = new SecurityHealth({ log, now: () => 0, plaintext: { bind: "0.0.0.0" } });
    expect(h.entries().map((e) => [e.code, e.severity])).toEqual([["plaintext_network", "warn"]]);
    const t = new SecurityHealth({ log, now: () => 0 });
    t.engineTls({ supported: true, evidence: "llama-server took the certificate and key" });
    expect(t.entries()).toEqual([]);
    t.engineTls({ supported: false, evidence: "llama-server is built without SSL support" });
    expect(t.entries()).toEqual([
      expect.objectContaining({
        code: "engine_plaintext",
        severity: "error",
        message: expect.stringContaining("built without SSL support") as unknown,
      }),
    ]);
  });

  it("peers that present another secret: named in a warning, or an error on the odd one out", () => {
    const { log } = logCapture();
    const h = new SecurityHealth({ log, now: () => 0 });
    expect(h.entries(2, [])).toEqual([]);
    // One stray peer among two: named in a warning (this node stays a placement candidate).
    expect(h.entries(2, ["node-3"])).toEqual([
      expect.objectContaining({
        code: "cluster_secret_mismatch",
        severity: "warn",
        message: expect.stringMatching(
          /observed: node-3 present\(s\) a secret this node does not accept, .*fail\)$/,
        ) as unknown,
        remediation: expect.stringContaining("POST /admin/reload") as unknown,
      }),
    ]);
    // No peer shares this node's secret: the odd one out is in error.
    expect(h.entries(2, ["node-1", "node-2"])).toEqual([
      expect.objectContaining({
        code: "cluster_secret_mismatch",
        severity: "error",
        message: expect.stringMatching(
          /node-1, node-2 present.*; no peer shares this node's secret$/,
        ) as unknown,
      }),
    ]);
  });
});
