// @ic/gguf front door: GGUF header reading with derived model facts, a GGUF writer, and tiny test models.
// Nothing here reads tensor data, so inspecting multi-GB models is cheap.
export { GGUF_ERROR_CODES, GgufError, isGgufError, type GgufErrorCode } from "./errors.ts";
export { metaInteger, metaString, modelFacts, type FactsInput, type ModelFacts } from "./facts.ts";
export {
  readGgufHeader,
  type GgufHeader,
  type GgufTensorInfo,
  type ReadGgufOptions,
} from "./reader.ts";
export {
  TINY_MODEL_DEFAULTS,
  writeTinyModel,
  type TinyModel,
  type TinyModelOptions,
} from "./tiny-model.ts";
export {
  TINY_PROJECTOR_DEFAULTS,
  tinyProjectorTensorNames,
  writeTinyProjector,
  type TinyProjector,
  type TinyProjectorOptions,
} from "./tiny-projector.ts";
export { TINY_CHAT_TEMPLATE, TINY_SPECIAL, TINY_VOCAB, TOKEN_TYPE } from "./tiny-vocab.ts";
export {
  GGML_TYPES,
  GGUF_VERSION,
  tensorByteSize,
  type GgmlType,
  type GgufArray,
  type GgufMetadata,
  type GgufScalar,
  type GgufValue,
} from "./types.ts";
export { encodeGgufHeader, writeGguf, type GgufDocument, type GgufTensorData } from "./writer.ts";
