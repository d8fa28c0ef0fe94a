// Types of the test-only Prometheus text parser (the package ships none): prom2json's shape.
declare module "parse-prometheus-text-format" {
  export interface ParsedSample {
    readonly labels?: Record<string, string>;
    readonly value?: string;
    readonly timestamp_ms?: string;
    readonly buckets?: Record<string, string>;
    readonly quantiles?: Record<string, string>;
    readonly count?: string;
    readonly sum?: string;
  }
  export interface ParsedFamily {
    readonly name: string;
    readonly help: string;
    readonly type: "COUNTER" | "GAUGE" | "HISTOGRAM" | "SUMMARY" | "UNTYPED";
    readonly metrics: ParsedSample[];
  }
  export default function parsePrometheusTextFormat(text: string): ParsedFamily[];
}
