import { describe, expect, it } from "vitest";
import { parseAuthFailure } from "./nats-server.ts";

// Lines as nats-server 2.9 prints them (seen with a wrong route secret, a client without one, and
// route certificates from another CA).
describe("parseAuthFailure", () => {
  it.each([
    [
      "[3462] 2026/11/23 15:23:13.040624 [ERR] 127.0.0.1:16222 - rid:4 - Route Error 'Authorization Violation'",
      { direction: "route-refused-by-peer", remote: "127.0.0.1:16222" },
    ],
    [
      "[3458] 2026/11/23 15:23:13.040446 [ERR] 10.231.0.3:47498 - rid:4 - authentication error",
      { direction: "route-rejected", remote: "10.231.0.3:47498" },
    ],
    [
      "[3458] 2026/11/23 15:23:13.040446 [ERR] 127.0.0.1:50122 - cid:7 - authentication error",
      { direction: "client-rejected", remote: "127.0.0.1:50122" },
    ],
    // Routes with certificates from two CAs (cluster.tls with verify), seen from both sides.
    [
      "[4237] 2026/11/26 14:52:27.307478 [ERR] 127.0.0.1:16222 - rid:5 - TLS route handshake error: x509: certificate signed by unknown authority",
      { direction: "route-tls-failed", remote: "127.0.0.1:16222" },
    ],
    [
      "[4237] 2026/11/26 14:52:26.316157 [ERR] 127.0.0.1:43108 - rid:4 - TLS route handshake error: remote error: tls: bad certificate",
      { direction: "route-tls-failed", remote: "127.0.0.1:43108" },
    ],
  ])("%s", (line, want) => {
    expect(parseAuthFailure(line, 5)).toEqual({ ...want, at: 5 });
  });

  it.each([
    "[3458] 2026/11/23 15:23:13.040460 [INF] 127.0.0.1:47498 - rid:4 - Router connection closed: Authentication Failure",
    "[3458] 2026/11/23 15:23:13.032573 [WRN] Plaintext passwords detected, use nkeys or bcrypt",
    "[3462] 2026/11/23 15:23:14.093375 [ERR] 127.0.0.1:16222 - rid:5 - Error flushing: writev: broken pipe",
    "[4237] 2026/11/26 14:52:26.316236 [INF] 127.0.0.1:43108 - rid:4 - Router connection closed: TLS Handshake Failure",
  ])("ignores %s", (line) => {
    expect(parseAuthFailure(line, 5)).toBeUndefined();
  });
});
