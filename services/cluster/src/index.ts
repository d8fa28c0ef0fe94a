// Front door of the master service: the per-node cluster agent (election, replica, master role).
export { ClusterAgent } from "./cluster-agent.ts";
export { DEFAULT_PROBE } from "./membership.ts";
export type { PeerView, ProbeSettings } from "./membership.ts";
export type {
  AgentListener,
  AgentOptions,
  AgentTimings,
  HeartbeatExtras,
  SelfInfo,
} from "./cluster-agent.ts";
export { MasterLog } from "./master-log.ts";
