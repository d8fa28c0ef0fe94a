// Front door of the state package: the replicated state machine and the election rule.
export { apply, OutOfOrderEvent } from "./apply.ts";
export { compareSeniority, decide, mostSenior, nodeIdFor } from "./election.ts";
export type { ElectionDecision, ElectionInput, HeardPeer, Peer } from "./election.ts";
