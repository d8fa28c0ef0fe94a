// Front door of the protocol package: every subject, schema, id and error code of the system.
export * from "./ids.ts";
