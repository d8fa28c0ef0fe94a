// Front door of the master service: the per-node cluster agent (election, replica, master role).
export { ClusterAgent } from "./cluster-agent.ts";
export type {
  AgentListener,
  AgentOptions,
  AgentTimings,
  HeartbeatExtras,
  PeerView,
  SelfInfo,
} from "./cluster-agent.ts";
export { MasterLog } from "./master-log.ts";
export { systemClock } from "./clock.ts";
export type { Clock } from "./clock.ts";
