// Hub emulator and safetensors fixtures: what tests of model-hub clients need, behind one import.
// The emulator is a real HTTP server; the fixtures are real files on disk.
export { startHubEmulator } from "./emulator.ts";
export type {
  AddRepoOptions,
  HubEmulator,
  HubEmulatorOptions,
  HubHold,
  HubRequestRecord,
} from "./emulator.ts";
export type { HubFileSource, StoredFile } from "./repo-store.ts";
export { modelCard, parseCardData } from "./front-matter.ts";
export type { CardData } from "./front-matter.ts";
export {
  DTYPE_BYTES,
  encodeSafetensors,
  parseSafetensors,
  safetensorsHeader,
  tensorBytes,
} from "./safetensors.ts";
export type { ParsedSafetensors, ParsedTensor, TensorSpec, TensorWithData } from "./safetensors.ts";
export { generateMtpCheckpoint } from "./checkpoint.ts";
export type { MtpCheckpoint, MtpCheckpointOptions, MtpStyle } from "./checkpoint.ts";
export { tinyGgufRepo } from "./gguf-repo.ts";
export type { GgufRepo, TinyQuant } from "./gguf-repo.ts";
