// HTTP calls of the ic command to one node. An error answer becomes an ApiError carrying the
// envelope's code and message; a node that cannot be reached, an UnreachableError. Never prints the token.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

/** TLS errors of a certificate nobody told this process to trust (OpenSSL's codes, as Node names them). */
const UNTRUSTED = new Set([
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
]);

export class UnreachableError extends Error {
  constructor(url: string, cause: unknown) {
    const inner = cause instanceof Error ? (cause.cause as Error | undefined) : undefined;
    const why = cause instanceof Error ? (inner?.message ?? cause.message) : String(cause);
    const code = (inner as { code?: string } | undefined)?.code;
    const hint =
      code !== undefined && UNTRUSTED.has(code)
        ? " (the node's certificate is from the cluster CA: pass --ca-file ca.crt or set IC_CA_FILE)"
        : "";
    super(`cannot reach ${url}: ${why}${hint}`);
    this.name = "UnreachableError";
  }
}

export interface ClientOptions {
  readonly url: string;
  readonly token?: string | undefined;
  readonly timeoutMs?: number;
}

export class Client {
  readonly url: string;
  constructor(private readonly o: ClientOptions) {
    this.url = o.url.replace(/\/+$/, "");
  }

  /** The token's header, for requests made without this client (resumable streams). */
  get authHeaders(): Record<string, string> {
    return this.o.token ? { authorization: `Bearer ${this.o.token}` } : {};
  }

  /** Another node of the same cluster, with the same token. */
  at(url: string): Client {
    return new Client({ ...this.o, url });
  }

  /** The ApiError of a refused raw() answer (its error envelope, else its status). */
  static async errorOf(r: Response): Promise<ApiError> {
    const e = (
      (await r.json().catch(() => ({}))) as { error?: { code?: string; message?: string } }
    ).error;
    return new ApiError(r.status, e?.code ?? `http_${r.status}`, e?.message ?? String(r.status));
  }

  async raw(method: string, path: string, body?: unknown, timeoutMs?: number): Promise<Response> {
    const headers: Record<string, string> = {};
    if (this.o.token) headers["authorization"] = `Bearer ${this.o.token}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    try {
      return await fetch(`${this.url}${path}`, {
        method,
        headers,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(timeoutMs ?? this.o.timeoutMs ?? 30_000),
      });
    } catch (e) {
      throw new UnreachableError(this.url, e);
    }
  }

  async json<T>(method: string, path: string, body?: unknown, timeoutMs?: number): Promise<T> {
    const r = await this.raw(method, path, body, timeoutMs);
    const text = await r.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      throw new ApiError(
        r.status,
        "invalid_response",
        `${method} ${path}: answered ${r.status} with a body that is not JSON`,
      );
    }
    if (!r.ok) {
      const err = (parsed as { error?: { code?: string; message?: string } } | undefined)?.error;
      throw new ApiError(
        r.status,
        err?.code ?? `http_${r.status}`,
        err?.message ?? `${method} ${path}: ${r.status}`,
      );
    }
    return parsed as T;
  }

  /** PUTs a file's bytes as they are read (no timeout: a model may take long to send). */
  async upload<T>(path: string, file: string, bytes: number): Promise<T> {
    const { createReadStream } = await import("node:fs");
    const { Readable } = await import("node:stream");
    const headers: Record<string, string> = {
      "content-type": "application/octet-stream",
      "content-length": String(bytes),
    };
    if (this.o.token) headers["authorization"] = `Bearer ${this.o.token}`;
    let r: Response;
    try {
      r = await fetch(`${this.url}${path}`, {
        method: "PUT",
        headers,
        body: Readable.toWeb(createReadStream(file)) as ReadableStream<Uint8Array>,
        duplex: "half",
      } as RequestInit);
    } catch (e) {
      throw new UnreachableError(this.url, e);
    }
    if (!r.ok) throw await Client.errorOf(r);
    return (await r.json()) as T;
  }

  get<T>(path: string, timeoutMs?: number): Promise<T> {
    return this.json<T>("GET", path, undefined, timeoutMs);
  }
}
