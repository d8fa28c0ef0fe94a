// GgufError: the one error class of this package, with a code from a closed union.
// Callers branch on `code` (a corrupt file is `truncated`/`invalid_*`, never a crash or a huge allocation).

export const GGUF_ERROR_CODES = [
  "io",
  "bad_magic",
  "unsupported_version",
  "truncated",
  "limit_exceeded",
  "invalid_metadata",
  "invalid_tensor",
  "invalid_options",
] as const;
export type GgufErrorCode = (typeof GGUF_ERROR_CODES)[number];

export class GgufError extends Error {
  override readonly name = "GgufError";
  /** Only I/O failures may succeed on a retry; a malformed file stays malformed. */
  readonly retryable: boolean;
  constructor(
    readonly code: GgufErrorCode,
    message: string,
    options: { cause?: unknown; path?: string } = {},
  ) {
    super(options.path === undefined ? message : `${options.path}: ${message}`, {
      cause: options.cause,
    });
    this.retryable = code === "io";
    this.path = options.path;
  }
  readonly path: string | undefined;
}

export function isGgufError(e: unknown, code?: GgufErrorCode): e is GgufError {
  return e instanceof GgufError && (code === undefined || e.code === code);
}
