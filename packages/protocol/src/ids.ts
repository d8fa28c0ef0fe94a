// Branded identifiers and the model-id rule shared by every service.
// A model id is `<org>/<name>`; it maps to the staging directory `<org>--<name>` and can never escape it.
import { z } from "zod";

declare const brand: unique symbol;
export type Brand<T, B extends string> = T & { readonly [brand]: B };

export type NodeId = Brand<string, "NodeId">;
export type SessionId = Brand<string, "SessionId">;
export type InstanceId = Brand<string, "InstanceId">;
export type TaskId = Brand<string, "TaskId">;
export type CommandId = Brand<string, "CommandId">;
export type ModelId = Brand<string, "ModelId">;

const SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$/;

/** Why a string is not a valid model id, or null when it is. */
export function modelIdProblem(value: string): string | null {
  const parts = value.split("/");
  if (parts.length !== 2) return "model id must look like <org>/<name>";
  for (const part of parts) {
    if (!SEGMENT.test(part)) {
      return "each part of a model id must start with a letter or digit and contain only letters, digits, '.', '_' or '-' (at most 96 characters)";
    }
    if (part.includes("..") || part.includes("--"))
      return "model id parts must not contain '..' or '--'";
  }
  return null;
}

export const ModelIdSchema = z
  .string()
  .superRefine((v, ctx) => {
    const problem = modelIdProblem(v);
    if (problem) ctx.addIssue({ code: "custom", message: problem });
  })
  .transform((v) => v as ModelId);

/** `org/name` -> `org--name`: the single directory a model may occupy under a staging or store root. */
export function modelDirName(id: ModelId): string {
  const [org, name] = id.split("/") as [string, string];
  return `${org}--${name}`;
}

/** Inverse of modelDirName; null for names that are not model directories. */
export function modelIdFromDirName(dir: string): ModelId | null {
  const i = dir.indexOf("--");
  if (i <= 0) return null;
  const id = `${dir.slice(0, i)}/${dir.slice(i + 2)}`;
  return modelIdProblem(id) === null ? (id as ModelId) : null;
}

export const NodeIdSchema = z
  .string()
  .min(1)
  .max(128)
  .transform((v) => v as NodeId);
export const SessionIdSchema = z
  .string()
  .min(1)
  .max(128)
  .transform((v) => v as SessionId);
export const InstanceIdSchema = z
  .string()
  .min(1)
  .max(128)
  .transform((v) => v as InstanceId);
export const TaskIdSchema = z
  .string()
  .min(1)
  .max(128)
  .transform((v) => v as TaskId);
export const CommandIdSchema = z
  .string()
  .min(1)
  .max(128)
  .transform((v) => v as CommandId);
