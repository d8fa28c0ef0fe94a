#!/usr/bin/env node
// Makes what a deployment's nodes need to trust each other, each secret in its own mode-0600 file:
// the cluster secret and the API tokens, a cluster CA, and per node named with --node a key and a
// certificate the CA signed for the node's addresses. Existing files are kept, so it is safe to run
// again (add a node later with another --node). Certificates are made with the openssl command.
//
//   node scripts/make-secrets.mjs <dir> [--node NAME=HOST[,HOST...]]...
//
// Copy to each node: ca.crt, NAME.crt and NAME.key (tls.ca_file, tls.cert_file, tls.key_file),
// plus cluster.secret and the tokens. ca.key stays where it is: it signs new nodes' certificates.
import { randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

const USAGE = "usage: node scripts/make-secrets.mjs <dir> [--node NAME=HOST[,HOST...]]...\n";
let args;
try {
  args = parseArgs({
    args: process.argv.slice(2),
    options: { node: { type: "string", multiple: true }, help: { type: "boolean", short: "h" } },
    allowPositionals: true,
    strict: true,
  });
} catch (e) {
  process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n${USAGE}`);
  process.exit(2);
}
const dir = args.positionals[0];
if (args.values.help || !dir || args.positionals.length > 1) {
  process.stderr.write(USAGE);
  process.exit(args.values.help ? 0 : 2);
}
const nodes = [];
for (const spec of args.values.node ?? []) {
  const m = /^([A-Za-z0-9][A-Za-z0-9._-]{0,63})=(.+)$/.exec(spec);
  const hosts = m ? m[2].split(",").filter(Boolean) : [];
  if (!m || hosts.length === 0 || !hosts.every((h) => /^[A-Za-z0-9.:_-]+$/.test(h))) {
    process.stderr.write(`--node ${spec}: expected NAME=HOST[,HOST...]\n${USAGE}`);
    process.exit(2);
  }
  nodes.push({ name: m[1], hosts });
}

mkdirSync(dir, { recursive: true, mode: 0o700 });
const files = {
  "cluster.secret": () => randomBytes(32).toString("hex"),
  "admin.token": () => `ica_${randomBytes(24).toString("base64url")}`,
  "read.token": () => `icr_${randomBytes(24).toString("base64url")}`,
  "inference.token": () => `ici_${randomBytes(24).toString("base64url")}`,
};
for (const [name, make] of Object.entries(files)) {
  const path = join(dir, name);
  if (existsSync(path)) {
    process.stdout.write(`kept ${path}\n`);
    continue;
  }
  writeFileSync(path, `${make()}\n`, { mode: 0o600, flag: "wx" });
  process.stdout.write(`wrote ${path} (mode 600)\n`);
}

// The cluster CA and the nodes' certificates: EC P-256 keys; the CA for 10 years, a node's
// certificate for 2 (serverAuth for its API, engines and route port; clientAuth for the routes it dials).
const openssl = (argv) => execFileSync("openssl", argv, { stdio: ["ignore", "ignore", "pipe"] });
const ecKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
const caKey = join(dir, "ca.key");
const caCrt = join(dir, "ca.crt");
if (existsSync(caKey) && existsSync(caCrt)) process.stdout.write(`kept ${caCrt}\n`);
else {
  const cn = `inference-cluster CA ${randomBytes(4).toString("hex")}`;
  openssl(
    ["req", "-x509", ...ecKey, "-keyout", caKey, "-out", caCrt, "-days", "3650"]
      .concat(["-subj", `/CN=${cn}`, "-addext", "basicConstraints=critical,CA:TRUE"])
      .concat(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]),
  );
  chmodSync(caKey, 0o600);
  process.stdout.write(`wrote ${caCrt} and ${caKey} (mode 600; keep it off the nodes)\n`);
}
for (const n of nodes) {
  const key = join(dir, `${n.name}.key`);
  const crt = join(dir, `${n.name}.crt`);
  if (existsSync(key) && existsSync(crt)) {
    process.stdout.write(`kept ${crt}\n`);
    continue;
  }
  const ip = (h) => /^\d{1,3}(\.\d{1,3}){3}$/.test(h) || h.includes(":");
  const names = [...new Set([...n.hosts, "localhost", "127.0.0.1"])];
  const san = names.map((h) => (ip(h) ? `IP:${h}` : `DNS:${h}`)).join(",");
  const work = mkdtempSync(join(tmpdir(), "ic-make-secrets-"));
  try {
    const csr = join(work, "node.csr");
    const ext = join(work, "node.ext");
    writeFileSync(
      ext,
      [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage=serverAuth,clientAuth",
        `subjectAltName=${san}`,
        "",
      ].join("\n"),
    );
    openssl(["req", ...ecKey, "-keyout", key, "-out", csr, "-subj", `/CN=${n.name}`]);
    chmodSync(key, 0o600);
    const serial = `0x${randomBytes(16).toString("hex")}`;
    openssl(
      ["x509", "-req", "-in", csr, "-CA", caCrt, "-CAkey", caKey, "-set_serial", serial].concat([
        "-days",
        "730",
        "-extfile",
        ext,
        "-out",
        crt,
      ]),
    );
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  process.stdout.write(`wrote ${crt} (${san}) and ${key} (mode 600)\n`);
}
