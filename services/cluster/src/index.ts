// Front door of @ic/cluster: the cluster agent every node runs (membership, election, replica) and the
// master role it takes on one node (sequencer, intent store).
export { ClusterAgent } from "./cluster-agent.ts";
export { DEFAULT_PROBE } from "./membership.ts";
export type { PeerView, ProbeSettings } from "./membership.ts";
export type {
  AgentListener,
  AgentOptions,
  AgentTimings,
  HeartbeatExtras,
  SelfInfo,
} from "./agent-options.ts";
export { MasterLog } from "./master-log.ts";
