// The model-hub token: from HF_TOKEN or the tool's dotenv file, replaceable through the API.
// Saved with mode 0600 (directory 0700); only a masked form ever leaves this module in responses.
import { chmod, mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "@ic/log";
import { parseDotenv, setDotenv } from "./dotenv.ts";

export const TOKEN_ENV = "HF_TOKEN";

/**
 * First and last characters only: at most a quarter of the token on each side, at most 4,
 * so short tokens reveal less; tokens under 4 characters are fully hidden.
 */
export function maskToken(token: string): string {
  const k = Math.min(4, Math.floor(token.length / 4));
  return k === 0 ? "****" : `${token.slice(0, k)}…${token.slice(-k)}`;
}

/**
 * Why a (trimmed) token cannot be used, or null. It travels in an Authorization header, so it must
 * be printable ASCII, and the hub library refuses tokens that do not start with `hf_`.
 */
export function tokenProblem(token: string): string | null {
  if (token === "") return "hf_token must not be empty";
  if (/\s/.test(token)) return "hf_token must not contain whitespace";
  if (!/^[\x21-\x7e]+$/.test(token)) return "hf_token must be printable ASCII";
  if (!token.startsWith("hf_")) return 'hf_token must start with "hf_"';
  return null;
}

export interface TokenStoreOptions {
  /** `~/.config/weights-publisher` or PUBLISHER_CONFIG_DIR. */
  readonly configDir: string;
  /** HF_TOKEN from the environment, if set. */
  readonly envToken?: string | undefined;
  readonly log: Logger;
}

export class TokenStore {
  private token: string | undefined;
  private readonly log: Logger;

  constructor(private readonly o: TokenStoreOptions) {
    this.log = o.log.child({ component: "token" });
  }

  get envFile(): string {
    return join(this.o.configDir, ".env");
  }

  /** Environment first, then the dotenv file. Never logs the value. */
  async load(): Promise<void> {
    const env = this.o.envToken?.trim();
    if (env) {
      this.token = env;
      this.configured("environment", env);
      return;
    }
    try {
      const fromFile = parseDotenv(await readFile(this.envFile, "utf8"))
        .get(TOKEN_ENV)
        ?.trim();
      if (fromFile) {
        this.token = fromFile;
        this.configured(this.envFile, fromFile);
        return;
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    this.log.info("no hub token configured");
  }

  private configured(source: string, token: string): void {
    const problem = tokenProblem(token);
    if (problem) this.log.warn({ source, problem }, "hub token is not usable; hub calls will fail");
    else this.log.info({ source }, "hub token configured");
  }

  get(): string | undefined {
    return this.token;
  }

  masked(): string | null {
    return this.token ? maskToken(this.token) : null;
  }

  /** Persists the token (other lines of the file kept) with mode 0600 and makes it current. */
  async set(token: string): Promise<void> {
    await mkdir(this.o.configDir, { recursive: true, mode: 0o700 });
    let text = "";
    try {
      text = await readFile(this.envFile, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    const tmp = `${this.envFile}.${process.pid}.tmp`;
    await writeFile(tmp, setDotenv(text, TOKEN_ENV, token), { mode: 0o600 });
    await chmod(tmp, 0o600);
    await rename(tmp, this.envFile);
    this.token = token;
    this.log.info({ file: this.envFile }, "hub token saved");
  }
}
