// Front door of @ic/staging: pure eviction and capacity decisions for staged model copies.
// No I/O here; the staging client in @ic/store gathers the inputs and performs the deletes.
export * from "./evict.ts";
export * from "./message.ts";
