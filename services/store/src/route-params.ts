// Path parameters of the store's file routes (store host files and uploads, peers' staged copies):
// the model id from {org} and {name}, and the artifact path after them.
import type { Context } from "hono";
import { routePath } from "hono/route";
import { ModelIdSchema, ServiceError, type ModelId } from "@ic/protocol";

/** `org/name` as a model id; invalid_request when it is not one. */
export function modelIdParam(org: string, name: string): ModelId {
  const parsed = ModelIdSchema.safeParse(`${org}/${name}`);
  if (!parsed.success) throw new ServiceError("invalid_request", `invalid model id ${org}/${name}`);
  return parsed.data;
}

/**
 * The raw segments after the route's wildcard (`.../files/*`), taken by position (org and name may
 * be spelled in any equivalent percent-encoding) and decoded one by one; invalid_request when a
 * segment is not valid percent-encoding.
 */
export function filePathParam(c: Context): string {
  const skip = routePath(c).split("/").length - 1;
  try {
    return new URL(c.req.url).pathname.split("/").slice(skip).map(decodeURIComponent).join("/");
  } catch {
    throw new ServiceError("invalid_request", "malformed file path");
  }
}
