// Front door of the master service: the per-node cluster agent (election, replica, master role).
export { ClusterAgent, DEFAULT_PROBE } from "./cluster-agent.ts";
export type {
  AgentListener,
  AgentOptions,
  AgentTimings,
  HeartbeatExtras,
  PeerView,
  ProbeSettings,
  SelfInfo,
} from "./cluster-agent.ts";
export { MasterLog } from "./master-log.ts";
