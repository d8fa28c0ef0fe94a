// Front door of the node service: the Node class (one node's components) for embedding and tests.
export { Node } from "./node.ts";
export type { NodeOptions } from "./node.ts";
