// The state every module shares, in one object: the API token, the last state document and the
// node names by node id (written by the state stream in live.js, read by the panels).

// Types for the checker only (npm test runs tsc over every module, tsconfig.public.json); the
// browser ignores them. The shapes are the API's own schemas, so a renamed field fails the
// typecheck. Typedefs of a module are exported: the panels import them from here.
/** @typedef {import("@ic/protocol").StateDocument} StateDocument */
/** @typedef {StateDocument["instances"][number]} InstanceView */
/** @typedef {InstanceView["assignments"][number]} AssignmentView */
/** @typedef {StateDocument["deployments"][number]} DeploymentView */
/** @typedef {import("@ic/protocol").ClusterStorage} ClusterStorage */

export const TOKEN_KEY = "ic.dashboard.token";

export const shared = {
  /** The bearer token ("" when none), from this tab's session or remembered in this browser. */
  token: sessionStorage.getItem(TOKEN_KEY) ?? localStorage.getItem(TOKEN_KEY) ?? "",
  /** The last state document. */
  /** @type {StateDocument | null} */
  state: null,
  /** Node names by node id. */
  names: new Map(),
};

export const nodeName = (id) => shared.names.get(id) ?? id;
