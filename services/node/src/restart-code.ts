/** The node process's exit code that asks its supervisor (main.ts) for a fresh process image. */
export const RESTART_EXIT_CODE = 75;
