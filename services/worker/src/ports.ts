// The narrow interfaces the worker needs from the rest of the node, wired in the launcher.
import type {
  Command,
  ControlState,
  IndexedEvent,
  ModelId,
  ModelRecord,
  NodeId,
} from "@ic/protocol";

export interface ClusterPort {
  readonly peerKey: string;
  readonly synced: boolean;
  readonly nodeId: NodeId | null;
  snapshot(): ControlState;
  command(cmd: Command): Promise<unknown>;
  on(listener: {
    event?: (ev: IndexedEvent, s: ControlState) => void;
    snapshot?: (s: ControlState) => void;
  }): () => void;
}

export interface StagedModel {
  /** Directory the engine loads from. */
  readonly dir: string;
  /** Absolute path of the base GGUF file. */
  readonly modelPath: string;
  readonly mmprojPath?: string | undefined;
}

/** Puts a model (and its companions) on local disk before a runner loads it. */
export interface StagingProgress {
  /** Bytes of the model on local disk so far (reused, linked and fetched). */
  readonly doneBytes: number;
  readonly totalBytes: number;
}

export interface Stager {
  stage(
    model: ModelRecord,
    signal: AbortSignal,
    onProgress?: (p: StagingProgress) => void,
  ): Promise<StagedModel>;
  /** The models live runners on this node name directly, and the companions of those models. */
  setInUse(live: readonly ModelId[], companions: readonly ModelId[]): void;
  /** An instance using `modelId` was torn down here (the deactivation eviction trigger). */
  released(modelId: ModelId): Promise<void>;
}
