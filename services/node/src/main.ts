// Process entry of a node: a thin supervisor that imports none of the node's code (so it is up in a
// fraction of a second) and forks the node process (run-node.ts). A restart request (POST
// /admin/restart) makes the node process stop everything (runners, nats-server -- releasing GPU
// memory) and exit with RESTART_EXIT_CODE, and the supervisor starts a fresh image at once. SIGTERM,
// SIGINT and SIGHUP are forwarded to the node process; when the node process ends, so does this one.
import { fork } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { dirname, extname, join } from "node:path";
import { NODE_USAGE, parseNodeArgs } from "./node-args.ts";
import { RESTART_EXIT_CODE } from "./restart-code.ts";

// Beside this file, as this file was started: run-node.ts under tsx, the .mjs of the same name in
// the launcher's bundle (@ic/launcher node-bundle.ts).
const self = process.argv[1]!;
const NODE_PROCESS = join(dirname(self), `run-node${extname(self)}`);

function supervise(): void {
  let child: ChildProcess | undefined;
  let stopping = false;
  const start = () => {
    child = fork(NODE_PROCESS, process.argv.slice(2), {
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    child.on("message", (m) => process.send?.(m));
    child.on("exit", (code, signal) => {
      if (!stopping && code === RESTART_EXIT_CODE) {
        start();
        return;
      }
      process.exit(code ?? (signal ? 1 : 0));
    });
  };
  // Forwarded as it comes: when the signal went to the whole group the node has its own copy too,
  // and counts the two as one stop request.
  const forward = (sig: NodeJS.Signals) => {
    stopping = true;
    child?.kill(sig);
  };
  process.on("SIGTERM", () => forward("SIGTERM"));
  process.on("SIGINT", () => forward("SIGINT"));
  // A reload goes to the node as it is; the supervisor keeps running.
  process.on("SIGHUP", () => child?.kill("SIGHUP"));
  start();
}

const args = parseNodeArgs(process.argv.slice(2));
if (args.kind === "help") {
  process.stdout.write(`${NODE_USAGE}\n`);
  process.exit(0);
} else if (args.kind === "error") {
  process.stderr.write(`node: ${args.message} (see --help)\n`);
  process.exit(2);
} else supervise();
