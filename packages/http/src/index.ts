// @ic/http front door: the HTTP edge every service shares. Bodies are read bounded (MAX_BODY_BYTES)
// and parsed with a schema (UTF-8, depth, zod, errors in words); every error leaves through one
// envelope (toResponse); tokens, their scopes and model globs are checked by one middleware.
export {
  humanIssue,
  MAX_JSON_DEPTH,
  nestedDeeperThan,
  parseJson,
  toResponse,
  validationError,
} from "./errors.ts";
export { MAX_BODY_BYTES, nodePair, readBody, requestHeader, watchClient } from "./node-http.ts";
export {
  authMiddleware,
  globToRegExp,
  mayUseModel,
  modelForbidden,
  requestToken,
  scopeFor,
  TokenSet,
} from "./auth.ts";
export type { ApiToken, AuthOptions } from "./auth.ts";
export { ComponentStack } from "./component.ts";
export { createNodeApp, routesOf } from "./node-app.ts";
export type { NodeAppOptions } from "./node-app.ts";
export type { Component, HeartbeatPart } from "./component.ts";
