// Failover bench, the report: the Failover section of docs/benchmarks.md (or BENCH_REPORT).
import { machineLine, writeSection } from "../lib/report.ts";
import { cell, median, range, span, SPEC_WINDOW_MS } from "./analysis.ts";
import type { KillFigures, ServeFigures } from "./analysis.ts";
import { CHAT_POLL_MS, DELAYS, POLL_MS, RUNS, TICK_MS } from "./common.ts";

/** How the runs went and the two tables of the kills. */
function killSection(k: KillFigures): string {
  const { fromKill, parts, outcomes, probeKinds } = k;
  return `\`npm run bench failover\` (\`BENCH_RUNS=${RUNS}\`) — ${machineLine()}.

Three nodes, each on its own lab host (a network namespace with its own address; host names, bearer
tokens and one cluster secret, as deployed: \`startHostCluster\`), with the spec's default timings
(heartbeat 2 s, election timeout 3 s, liveness timeout 4 s). Every run starts a fresh cluster, waits
for it to converge, and at a random point of the heartbeat cycle either kills the victim's process
group (node, nats-server, llama-server) with SIGKILL or cuts its host off (blackhole routes to and
from both other hosts: no packet passes, nothing is closed), then polls every survivor's \`GET /state\`
every ${POLL_MS} ms from the root namespace. Kills run with two route settings, interleaved: the nats routes
straight over the lab bridge (well under 1 ms), and every route through a user-space relay in the
benchmark process that adds ${DELAYS[1]} ms each way (\`routeDelayMs: ${DELAYS[1]}\`; the kernel has no netem; \`ss\`
in every namespace checks that each route goes through a relay). For worker kills node-1 is the
store host, the tiny model's only instance is placed on the victim, and one streaming and one
non-streaming chat completion (max_tokens 3000) are generating through node-1's gateway at the kill.
${RUNS} runs of each kind per setting. The baseline is the configured timeout that detection waited for
before connection loss became a failure signal; the previous run of this benchmark (2026-11-23 16:48,
timeouts only) measured medians of 1916 / 2802 ms (master, direct / 20 ms), 3357 / 3356 ms (worker) and
2945 ms (serving again).

| what | added route delay | median (ms) | range (ms) | baseline (ms) | median / baseline | target |
|---|---|---|---|---|---|---|
${fromKill.join("\n")}

The parts, medians (ranges) in ms from the kill, read from the deciding survivor's log lines (the
new master for master kills, the master otherwise): "peer gone: its connection dropped and it answers
no probe" (the fast path's verdict), then the decision ("elected master; starting session", or
"node lost (…)"), then done on every survivor as the poll saw it. "Declared by" is how the victim
went: by the fast path (connection lost) or by the timeouts (election timeout / heartbeat timeout).

| what | added route delay | declared by | kill -> "peer gone" | "peer gone" -> decision | decision -> done on every survivor | victim silent at the kill (last heartbeat) |
|---|---|---|---|---|---|---|
${parts.join("\n")}

How the open requests of a killed worker ended (every run, both route settings): ${outcomes}.
How the probes failed (every try of every run): master kills ${probeKinds("master", 0)} (direct),
${probeKinds("master", DELAYS[1])} (relays); worker kills ${probeKinds("worker", 0)} (direct), ${probeKinds("worker", DELAYS[1])} (relays).

`;
}

/** Where the time of a kill goes. */
function whereTimeGoes(k: KillFigures): string {
  const { masterFast, workerFast, allDetected, hops, relayTimeouts, relayTries, cutTickWait } = k;
  return `Where the time goes:

- **Detection is now a dropped connection plus three probes.** Every follower holds one HTTP request
  open to its master's API (\`GET /cluster/watch\`). A SIGKILLed process's sockets are closed by its
  kernel at once, so the other end sees the drop within a millisecond: the followers when the master
  dies, the master when a follower dies. That end then asks the peer over the bus (\`ic.node.ping.<peer
  key>\`, ${3} tries, 300 ms deadline each, 100 ms apart after an immediate "no responder"). A dead process
  has no subscription anywhere once its bus connection (or its whole nats-server, and so the route)
  is gone, so each try fails at once with "no responder", and the verdict comes two gaps after the
  drop: kill -> "peer gone" is ${cell(masterFast)} ms (master kills) and ${cell(workerFast)} ms (worker kills), medians of the
  route settings. Everything after it is one tick and one hop: the master emits NodeLeft in the same
  pass, the new master starts its session at once, and the other survivor applies it when it arrives.
- **No phase any more.** The old detection waited for the victim's heartbeats to be missed, so its
  time from the kill depended on where in the 2 s heartbeat cycle the kill fell (the last column).
  The fast path does not: kill -> "peer gone" spans ${range(allDetected)} ms over every kill, where the
  old spread was a whole heartbeat interval. This run shared the machine's 2 cores with other
  benchmarks and tests (load average 1–2), which is where the slow tails most likely come from.
- **What ${DELAYS[1]} ms between hosts adds.** The drop itself does not cross a relay (the watch connection is
  direct HTTP between the hosts, not a nats route), but the probes and the events do: the new
  master's session reaches the other survivor one delayed hop later (elected -> adopted: median
  ${cell(median(hops[0]!))} ms direct, ${cell(median(hops[1]!))} ms with the relays). ${relayTimeouts} of the ${relayTries} relayed probes timed out (300 ms): a
  probe sent right after the drop can reach the survivor's nats-server before the relay has passed on
  the dead server's close (it delays a FIN like data), and is routed to the dead server; the next
  try fails at once.
- **Open requests of a killed worker** end when their engine's connection breaks, which is at the
  kill itself (llama-server dies with its node's process group): the gateway answers the typed,
  retryable \`instance_lost\` (or the stream's error event) without waiting for any verdict. NodeLeft
  follows and would end them anyway (the watch on the chat path fails a request whose node left).
- **A cut network is still found by the timeouts.** Blackhole routes close no socket, so the watch
  connection stays open and nothing is probed; the master's tick finds the victim silent past the
  liveness timeout on its next tick (every ${TICK_MS} ms; the wait after the timeout: ${span(cutTickWait)} ms). The spec's window of
  ${SPEC_WINDOW_MS[0] / 1000}–${SPEC_WINDOW_MS[1] / 1000} s holds: detection from the cut is timeout + tick, less the part of a heartbeat
  interval that had already passed. A frozen host (a stopped process, a hung kernel) is the same case:
  no socket closes.
- **No false loss under load.** A drop alone never removes a node: only a drop whose every probe fails
  does. Under load nothing drops, and \`tests/cluster/load.integration.test.ts\` (3 hosts, engines
  saturating both cores) still asserts that no node is declared lost.

`;
}

/** Node lost -> model serving again: how it was run, the steps, and what they say. */
function servingSection(s: ServeFigures): string {
  const { holders, serveSteps, answerList, detection, servedMedian, restart, startMedian } = s;
  return `### Node lost -> model serving again

The last row of the first table. In the same run, interleaved with the others (direct routes only):
a fresh 3-node cluster as above, node-1 the store host and the first master. The model is placed
with \`excluded_nodes: [node-1]\`, so its only instance lands on node-2 or node-3 and the deployment
keeps the exclusion: the re-placement can only go to the other one (${holders}). A 2-token chat
completion through node-1 is polled every ${CHAT_POLL_MS} ms (or right after a slower answer) until it answers 200;
then, at a random point of the heartbeat cycle, the holder's process group gets SIGKILL, and the same
poll measures kill -> the first 200 again. The baseline is the old bound: liveness timeout + a plain
runner start (\`POST /place_instance\` -> the first 200 chat on a node with no staged copy, measured in
the same run). The survivor never staged the model either, so it fetches it from the store host
(${s.fetchedBytes}). The steps, from the nodes' log lines, medians (ranges) in ms:

| step | plain runner start (from the POST) | node lost -> serving again (from the kill) |
|---|---|---|
${serveSteps.join("\n")}

What the ${RUNS} runs' chat polls got between the kill and the first 200: ${answerList}.

- **Detection is no longer most of it.** From the kill to the master's "node lost" is ${cell(detection)} ms
  of the ${cell(servedMedian)} (medians); from "node lost" to the first 200 is ${cell(restart)} ms: the re-placement,
  staging the model, llama-server's start and the first request, about one plain runner start
  (${cell(startMedian)} ms). A real model's load time replaces the llama-server start.
- **What clients see in between**: until the master declares the node lost, the dead instance is still
  ready in the state, so the gateway routes to its engine and answers \`500 instance_lost\` (connection
  refused); from NodeLeft to the new runner's readiness it answers \`404 model_not_ready\`. Both are
  retryable.
`;
}

export async function writeReport(k: KillFigures, s: ServeFigures): Promise<void> {
  await writeSection("Failover", killSection(k) + whereTimeGoes(k) + servingSection(s));
  console.log("wrote the Failover section of docs/benchmarks.md");
}
