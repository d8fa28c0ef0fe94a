// Front door of the multi-host harness: network-namespace "hosts" on a bridge, link faults, latency.
// Cluster tests use it to run as deployed (one address per node) instead of all on 127.0.0.1.
export { NETLAB_PREFIX, NETLAB_STATE_DIR, NetLab } from "./lab.ts";
export type { BandwidthLimit, LabHost, NetLabOptions } from "./lab.ts";
export { DelayRelay } from "./delay-relay.ts";
export { PacketCapture } from "./capture.ts";
export type { DelayRelayOptions } from "./delay-relay.ts";
