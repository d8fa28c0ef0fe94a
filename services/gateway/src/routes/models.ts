// GET /v1/models and GET /v1/models/{id}: the models with a ready instance that the token may use, in
// OpenAI's list shape (`object: "model"`), with what clients read beside it: the kinds of its ready
// instances, its context length (as `context_length` and vLLM's `max_model_len`), and its
// capabilities in Ollama's words (completion, tools, vision, embedding, rerank).
import type { Hono } from "hono";
import { INSTANCE_KIND_TABLE, INSTANCE_KINDS, kindOf } from "@ic/protocol";
import type { ClusterView, ControlState, ModelEntry, ModelRecord } from "@ic/protocol";
import { mayUseModel, modelForbidden, requestToken } from "@ic/http";
import { notServableError, readiness, readyInstances, readyModels } from "../readiness.ts";

/** The entry of a model with ready instances (pure: from the state alone). */
export function modelEntry(state: ControlState, id: string): ModelEntry {
  const ready = readyInstances(state, id);
  const has = new Set(ready.map((r) => kindOf(r.instance)));
  const kinds = INSTANCE_KINDS.filter((k) => has.has(k));
  const model = state.models[id];
  const sizes = ready.flatMap((r) =>
    r.instance.context_size === undefined ? [] : [r.instance.context_size],
  );
  const context =
    sizes.length > 0
      ? Math.min(...sizes)
      : model?.context_length
        ? model.context_length
        : undefined;
  const capabilities = kinds.map((k) => INSTANCE_KIND_TABLE[k].capability);
  if (has.has("generate")) {
    if (model?.tools) capabilities.push("tools");
    if (model?.mmproj) capabilities.push("vision");
  }
  return {
    id,
    object: "model",
    created: 0,
    owned_by: "cluster",
    kinds,
    ...(context ? { context_length: context, max_model_len: context } : {}),
    capabilities,
  };
}

/**
 * The entry of an on-demand model: as modelEntry once loaded; before, what a chat request would load
 * (a generating instance) from the registry's facts.
 */
function onDemandEntry(state: ControlState, model: ModelRecord): ModelEntry {
  if (readyInstances(state, model.model_id).length > 0)
    return { ...modelEntry(state, model.model_id), loaded: true };
  return {
    id: model.model_id,
    object: "model",
    created: 0,
    owned_by: "cluster",
    kinds: [],
    ...(model.context_length
      ? { context_length: model.context_length, max_model_len: model.context_length }
      : {}),
    capabilities: [
      INSTANCE_KIND_TABLE.generate.capability,
      ...(model.tools ? ["tools"] : []),
      ...(model.mmproj ? ["vision"] : []),
    ],
    loaded: false,
  };
}

export interface ModelRoutesOptions {
  readonly cluster: ClusterView;
  /** Whether a request loads this model when nothing serves it (chat/on-demand.ts). */
  readonly onDemand?: (model: ModelRecord) => boolean;
}

export function modelRoutes(app: Hono, o: ModelRoutesOptions): void {
  const onDemand = o.onDemand ?? (() => false);
  app.get("/v1/models", (c) => {
    // Models with a ready instance (the same test the chat route applies) and those a request
    // loads, that the token may use.
    const token = requestToken(c);
    const state = o.cluster.snapshot();
    const loadable = Object.values(state.models).filter(onDemand);
    const ids = new Set(loadable.map((m) => m.model_id as string));
    const entries = [
      ...readyModels(state)
        .filter((id) => !ids.has(id))
        .map((id) => modelEntry(state, id)),
      ...loadable.map((m) => onDemandEntry(state, m)),
    ];
    return c.json({
      object: "list",
      data: entries.filter((e) => mayUseModel(token, e.id)).sort((a, b) => (a.id < b.id ? -1 : 1)),
    });
  });

  // OpenAI's models.retrieve: the model's entry when it would be listed; else why not, as chat says it
  // (a model the token may not use is 403 before anything is looked up). Ids hold a slash (org/name);
  // an encoded one (%2F) is the same id (hono decodes the parameter).
  app.get("/v1/models/:id{.+}", (c) => {
    const id = c.req.param("id");
    const token = requestToken(c);
    if (token && !mayUseModel(token, id)) throw modelForbidden(token, id);
    const state = o.cluster.snapshot();
    const model = state.models[id];
    if (model && onDemand(model)) return c.json(onDemandEntry(state, model));
    const ready = readiness(state, id, Date.now());
    if (ready.kind !== "ready") throw notServableError(id, ready);
    return c.json(modelEntry(state, id));
  });
}
