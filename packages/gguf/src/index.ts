// @ic/gguf front door: GGUF header reading with derived model facts, and a GGUF writer.
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
