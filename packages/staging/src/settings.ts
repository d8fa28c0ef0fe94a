// The node's staging settings in bytes (from the config's `model_store.staging` section, in GiB), and
// the live holder that the dashboard's settings editor replaces while the node runs. The defaults are
// the config schema's; nothing here repeats them.
import { GiB } from "@ic/protocol";

/** The staging section of the config, in bytes. */
export interface StagingSettings {
  readonly cleanupOnDeactivate: boolean;
  readonly keepRecentBytes: number;
  /** Free space that must remain after a transfer (spec: 10 GiB). */
  readonly headroomBytes: number;
}

/** Converts the config's `model_store.staging` section (GiB) into StagingSettings (bytes). */
export function stagingSettings(section: {
  readonly cleanup_on_deactivate: boolean;
  readonly staging_keep_recent_gb: number;
  readonly headroom_gb: number;
}): StagingSettings {
  return {
    cleanupOnDeactivate: section.cleanup_on_deactivate,
    keepRecentBytes: Math.round(section.staging_keep_recent_gb * GiB),
    headroomBytes: Math.round(section.headroom_gb * GiB),
  };
}

/**
 * The node's staging settings as they are now: the operator can replace them while the node runs
 * (the dashboard's settings editor, PUT /admin/settings). Readers hold this object and read a field
 * each time they need it, so a replacement applies from their next read (the next eviction pass,
 * staging transaction or storage report); nothing caches a field.
 */
export class LiveStagingSettings implements StagingSettings {
  #current: StagingSettings;
  constructor(initial: StagingSettings) {
    this.#current = Object.freeze({ ...initial });
  }
  get cleanupOnDeactivate(): boolean {
    return this.#current.cleanupOnDeactivate;
  }
  get keepRecentBytes(): number {
    return this.#current.keepRecentBytes;
  }
  get headroomBytes(): number {
    return this.#current.headroomBytes;
  }
  /** A frozen copy of the values in force. */
  get current(): StagingSettings {
    return this.#current;
  }
  replace(next: StagingSettings): void {
    this.#current = Object.freeze({ ...next });
  }
}
