// Front door of @ic/staging: pure eviction and capacity decisions for staged model copies, the staging
// settings, and the FIFO lock that admits transfers one at a time. No I/O here; the staging client in
// @ic/store gathers the inputs and performs the deletes.
export * from "./evict.ts";
export * from "./message.ts";
export * from "./settings.ts";
export { Serial } from "./serial.ts";
