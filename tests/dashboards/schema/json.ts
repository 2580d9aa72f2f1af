// A dashboard file is JSON: where Grafana's schema names a TypeScript enum, the JSON holds
// the enum's value. Json<T> is T with every string enum replaced by the union of its
// values (numeric enums already accept their numbers), recursively; nothing else changes,
// so required keys, value types and unknown keys are checked as T declares them.
export type Json<T> = T extends string
  ? `${T}`
  : T extends number | boolean | null | undefined
    ? T
    : T extends ReadonlyArray<infer U>
      ? Array<Json<U>>
      : T extends object
        ? { [K in keyof T]: Json<T[K]> }
        : T;
