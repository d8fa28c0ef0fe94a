// Front door of the testkit: real processes on free ports, fixtures and emulators for tests.
export * from "./ports.ts";
export * from "./cluster.ts";
export * from "./certs.ts";
export * from "./engines.ts";
export * from "./balancer.ts";
export * from "./hub/index.ts";
export * from "./netns/index.ts";
export * from "./census.ts";
export * from "./browser.ts";
export * from "./soak.ts";
