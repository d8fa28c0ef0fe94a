// A packet capture on lab links for tests that check what crosses the wire: every frame seen on the
// given root-namespace interfaces (a host's bridge-side veth carries all its traffic), read with a
// raw AF_PACKET socket by a small python3 program (root; no tcpdump needed) into a file.
// Frames are stored whole and back to back, so a search finds a string unless TCP split it across
// two segments; a test pairs every "not found" with a plaintext control that must be found.
import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const PROGRAM = `
import select, signal, socket, sys
out = open(sys.argv[1], "wb")
socks = []
for ifname in sys.argv[2:]:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(3))
    s.bind((ifname, 0))
    socks.append(s)
running = True
def stop(*_):
    global running
    running = False
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while running:
    ready, _, _ = select.select(socks, [], [], 0.1)
    for s in ready:
        out.write(s.recv(262144))
for s in socks:
    s.setblocking(False)
    while True:
        try:
            out.write(s.recv(262144))
        except BlockingIOError:
            break
out.close()
`;

export class PacketCapture {
  private frames: Promise<Buffer> | undefined;

  private constructor(
    private readonly child: ChildProcess,
    private readonly dir: string,
  ) {}

  /** Starts capturing on `ifnames` (root-namespace interfaces); resolves once the sockets are bound. */
  static async start(ifnames: readonly string[]): Promise<PacketCapture> {
    const dir = mkdtempSync(join(tmpdir(), "ic-capture-"));
    const child = spawn("python3", ["-c", PROGRAM, join(dir, "frames.bin"), ...ifnames], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let err = "";
    child.stderr!.on("data", (c: Buffer) => (err += c.toString()));
    await new Promise<void>((resolve, reject) => {
      child.stdout!.once("data", () => resolve());
      child.once("exit", (code) => reject(new Error(`capture exited (${code}): ${err.trim()}`)));
    });
    return new PacketCapture(child, dir);
  }

  /** Stops the capture and returns every frame it saw, concatenated (the same frames if called again). */
  stop(): Promise<Buffer> {
    this.frames ??= (async () => {
      if (this.child.exitCode === null && this.child.signalCode === null) {
        const exited = new Promise((r) => this.child.once("exit", r));
        this.child.kill("SIGTERM");
        await exited;
      }
      try {
        return readFileSync(join(this.dir, "frames.bin"));
      } finally {
        rmSync(this.dir, { recursive: true, force: true });
      }
    })();
    return this.frames;
  }
}
