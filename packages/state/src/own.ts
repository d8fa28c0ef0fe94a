// Lookups in the control state's records by ids that come from clients: only own entries count, so
// an id like "constructor" or "__proto__" never finds a member of Object.prototype.

export function own<T>(record: Readonly<Record<string, T>>, key: string): T | undefined {
  return Object.hasOwn(record, key) ? record[key] : undefined;
}
