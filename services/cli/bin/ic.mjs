#!/usr/bin/env node
// The `ic` binary: runs src/main.ts through tsx (the workspace runs TypeScript sources directly).
import { register } from "tsx/esm/api";

register();
await import("../src/main.ts");
