// A cluster CA and node certificates for tests, made by the script operators run
// (scripts/make-secrets.mjs), and trusted by this test process so its requests reach HTTPS nodes.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { REPO_ROOT } from "@ic/launcher";
import { trustClusterCa } from "@ic/tls";

export interface ClusterCerts {
  /** The directory make-secrets.mjs wrote (ca.crt, ca.key, <name>.crt, <name>.key, ...). */
  readonly dir: string;
  readonly caFile: string;
  /** A node's `tls` config section. */
  tlsConfig(name: string): { ca_file: string; cert_file: string; key_file: string };
}

const trusted: string[] = [];

/**
 * A new cluster CA with a certificate for each node (valid for its host names and addresses). The
 * CA is added to what this process trusts (the CAs of earlier calls stay trusted).
 */
export function makeClusterCerts(
  nodes: readonly { readonly name: string; readonly hosts: readonly string[] }[],
  opts: { trust?: boolean } = {},
): ClusterCerts {
  const dir = mkdtempSync(join(tmpdir(), "ic-certs-"));
  execFileSync(
    process.execPath,
    [
      join(REPO_ROOT, "scripts/make-secrets.mjs"),
      dir,
      ...nodes.flatMap((n) => ["--node", `${n.name}=${n.hosts.join(",")}`]),
    ],
    { stdio: "ignore" },
  );
  const caFile = join(dir, "ca.crt");
  if (opts.trust !== false) {
    trusted.push(readFileSync(caFile, "utf8"));
    trustClusterCa(trusted.join("\n"));
  }
  return {
    dir,
    caFile,
    tlsConfig: (name) => ({
      ca_file: caFile,
      cert_file: join(dir, `${name}.crt`),
      key_file: join(dir, `${name}.key`),
    }),
  };
}
