// GET /v1/models' entries: kinds, context length and capabilities from the state alone (table tests).
import { describe, expect, it } from "vitest";
import type { Instance, InstanceId, InstanceKind } from "@ic/protocol";
import { cluster, INSTANCE, MODEL } from "../testing/scripted.ts";
import { modelEntry } from "./models.ts";

/** The scripted cluster's state, with one more ready instance of MODEL of `kind` (and its context). */
function withAnother(kind: InstanceKind, contextSize?: number, mmproj = false) {
  const state = cluster("http://127.0.0.1:9", { mmproj }).view.snapshot();
  const id = "i-2" as InstanceId;
  const first = state.instances[INSTANCE]!;
  state.instances[id] = {
    ...first,
    instance_id: id,
    kind,
    ...(contextSize ? { context_size: contextSize } : {}),
  } as Instance;
  state.runners[`${id}/0`] = { ...state.runners[`${INSTANCE}/0`]!, instance_id: id };
  return state;
}

describe("modelEntry", () => {
  it.each<[string, ReturnType<typeof withAnother>, Partial<ReturnType<typeof modelEntry>>]>([
    [
      "a chat model: its own context, completion",
      cluster("http://127.0.0.1:9").view.snapshot(),
      {
        kinds: ["generate"],
        context_length: 256,
        max_model_len: 256,
        capabilities: ["completion"],
      },
    ],
    [
      "with a projector it takes images",
      cluster("http://127.0.0.1:9", { mmproj: true }).view.snapshot(),
      { capabilities: ["completion", "vision"] },
    ],
    [
      "a rerank instance beside it: both kinds, the instance's smaller context",
      withAnother("rerank", 128),
      {
        kinds: ["generate", "rerank"],
        context_length: 128,
        capabilities: ["completion", "rerank"],
      },
    ],
    [
      "an embedding instance only (the older field) takes no images, even with a projector",
      (() => {
        const s = cluster("http://127.0.0.1:9", { embeddings: true, mmproj: true }).view.snapshot();
        return s;
      })(),
      { kinds: ["embed"], capabilities: ["embedding"] },
    ],
  ])("%s", (_, state, want) => {
    expect(modelEntry(state, MODEL)).toMatchObject({ id: MODEL, object: "model", ...want });
  });

  it("a template that reads tools adds tools", () => {
    const state = cluster("http://127.0.0.1:9").view.snapshot();
    state.models[MODEL] = { ...state.models[MODEL]!, tools: true };
    expect(modelEntry(state, MODEL).capabilities).toEqual(["completion", "tools"]);
  });
});
