// Headless Chromium for the GUI tests (the publisher's page, the dashboard): the Debian `chromium`
// driven by playwright-core, in a throwaway profile, with the page's errors collected.
import { createHash, X509Certificate } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import type { BrowserContext, Page } from "playwright-core";

export const CHROMIUM = process.env["CHROMIUM_PATH"] ?? "/usr/bin/chromium";

export interface TestBrowser extends AsyncDisposable {
  readonly context: BrowserContext;
  readonly page: Page;
  /** Uncaught exceptions and console errors of the page (CSP violations included). */
  readonly errors: string[];
  close(): Promise<void>;
}

export async function launchChromium(
  o: {
    viewport?: { width: number; height: number };
    /** Console errors to leave out of `errors` (e.g. failed loads the page handles itself). */
    ignoreConsole?: RegExp;
    /**
     * Certificate files (PEM) this browser accepts although no CA it knows signed them: an HTTPS
     * cluster's node certificates. Only these are accepted (Chromium's SPKI pin list), nothing else.
     */
    trustCertFiles?: readonly string[];
    /**
     * An argv prefix the browser runs under, e.g. a lab host's `ip netns exec <ns>`. Chromium aborts
     * its requests (`net::ERR_NETWORK_CHANGED`) whenever an interface of its network namespace
     * changes, which other test files' labs do all the time in the root one.
     */
    wrap?: readonly string[];
  } = {},
): Promise<TestBrowser> {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `no Chromium at ${CHROMIUM}: apt-get install -y chromium (or set CHROMIUM_PATH)`,
    );
  const dir = mkdtempSync(join(tmpdir(), "ic-chromium-"));
  const profile = join(dir, "profile");
  mkdirSync(profile);
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: o.wrap ? wrapperScript(dir, o.wrap) : CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      ...(o.trustCertFiles && o.trustCertFiles.length > 0
        ? [`--ignore-certificate-errors-spki-list=${o.trustCertFiles.map(spkiPin).join(",")}`]
        : []),
    ],
    viewport: o.viewport ?? { width: 1100, height: 900 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => {
    if (m.type() === "error" && !(o.ignoreConsole?.test(m.text()) ?? false)) errors.push(m.text());
  });
  const close = async () => {
    await context.close();
    rmSync(dir, { recursive: true, force: true });
  };
  return { context, page, errors, close, [Symbol.asyncDispose]: close };
}

/**
 * An executable that runs Chromium under `wrap` with the arguments it is given. `ip netns exec`
 * execs in place, so the browser keeps the pid and the pipes playwright gave the script.
 */
function wrapperScript(dir: string, wrap: readonly string[]): string {
  const path = join(dir, "chromium");
  const quote = (a: string) => `'${a.replaceAll("'", `'\\''`)}'`;
  writeFileSync(path, `#!/bin/sh\nexec ${[...wrap, CHROMIUM].map(quote).join(" ")} "$@"\n`);
  chmodSync(path, 0o755);
  return path;
}

/** The base64 SHA-256 of a certificate's public key (SubjectPublicKeyInfo), as Chromium pins it. */
function spkiPin(file: string): string {
  const key = new X509Certificate(readFileSync(file)).publicKey;
  return createHash("sha256")
    .update(key.export({ type: "spki", format: "der" }))
    .digest("base64");
}
