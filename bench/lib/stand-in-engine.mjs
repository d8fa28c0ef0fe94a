#!/usr/bin/env node
// A stand-in for llama-server in benchmarks that measure our path only (issue 32): the node starts
// it as its engine (`engine.server_bin`), so the worker supervises it, the gateway routes to it and
// forwards its answers exactly as with llama-server, but it answers at once, or at a set token rate,
// without a model. Its HTTP surface is the part of llama-server's that the node uses, in the same
// shapes (chunks copied from llama-server b1-de3ff81): GET /health, GET /metrics, GET /v1/models,
// POST /v1/chat/completions and /v1/completions, streaming or not, behind LLAMA_API_KEY, over HTTPS
// when given --ssl-key-file and --ssl-cert-file. It reads the model file's path only to fail as
// llama-server does when it is absent, and it refuses --rpc: it cannot split a model over nodes, so
// the node's capability probe finds it cannot (never accept what cannot run).
// Its own flags (pass them through the node's `engine.extra_args`):
//   --stand-in-tps N   tokens per second per stream (0, the default: every token at once)
//   --stand-in-text S  the text of each token (default "a")
//   --stand-in-slots N streams generated at once (0, the default: any number); the others wait in
//                      order, as llama-server's requests wait for one of its -np slots
// Everything else llama-server takes is accepted and ignored.
import { createServer as createHttp } from "node:http";
import { createServer as createHttps } from "node:https";
import { existsSync, readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";

/** llama-server flags that take a value (the others this stand-in sees are switches). */
const VALUED = new Set([
  "-m",
  "--model",
  "--alias",
  "--host",
  "--port",
  "-c",
  "--ctx-size",
  "-ngl",
  "--n-gpu-layers",
  "-fit",
  "-lv",
  "--verbosity",
  "-t",
  "--threads",
  "-tb",
  "--threads-batch",
  "-np",
  "--parallel",
  "-sm",
  "--split-mode",
  "-ts",
  "--tensor-split",
  "-md",
  "--model-draft",
  "--mmproj",
  "--pooling",
  "--ssl-key-file",
  "--ssl-cert-file",
  "--rpc",
  "--stand-in-tps",
  "--stand-in-text",
  "--stand-in-slots",
  "-ngld",
  "--draft-max",
  "--draft-min",
  "-b",
  "-ub",
  "--api-key",
]);

function parseArgs(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (VALUED.has(a)) o[a] = argv[++i];
    else o[a] = true;
  }
  return o;
}

const args = parseArgs(process.argv.slice(2));

if (args["--list-devices"]) {
  // What a CPU-only llama-server prints: no devices. On a machine with a GPU a node refuses a CPU
  // engine (gpu_serving_disabled), so a benchmark there names the machine's GPUs in
  // STAND_IN_DEVICES (one per line, as a CUDA llama-server lists them: `CUDA0: <name> (<total> MiB,
  // <free> MiB free)`), and the stand-in lists them as its own.
  const devices = (process.env.STAND_IN_DEVICES ?? "").split("\n").filter(Boolean);
  process.stdout.write(`Available devices:\n${devices.map((d) => `  ${d}\n`).join("")}`);
  process.exit(0);
}
if (args["--rpc"]) {
  process.stderr.write("stand-in engine: no rpc devices; it serves single-node instances only\n");
  process.exit(1);
}
const modelPath = args["-m"] ?? args["--model"];
process.stderr.write(`llama_model_load: loading model from '${modelPath}' (stand-in engine)\n`);
if (!modelPath || !existsSync(modelPath)) {
  process.stderr.write(`llama_model_load: error loading model: file not found: ${modelPath}\n`);
  process.exit(1);
}

const alias = args["--alias"] ?? modelPath;
const tps = Number(args["--stand-in-tps"] ?? 0);
const tokenText = args["--stand-in-text"] ?? "a";
const apiKey = process.env.LLAMA_API_KEY;
const fingerprint = "b1-stand-in";

let processing = 0;
let predicted = 0;

const slots = Number(args["--stand-in-slots"] ?? 0);
let busy = 0;
/** Requests waiting for a slot, oldest first. */
const deferred = [];
/** Resolves once the request has a slot (at once without a slot limit). */
function acquire() {
  if (slots <= 0 || busy < slots) {
    busy++;
    return Promise.resolve();
  }
  return new Promise((r) => deferred.push(r));
}
/** A request's slot is free: the oldest waiting request takes it. */
function release() {
  if (slots <= 0) return;
  const next = deferred.shift();
  if (next) next();
  else busy--;
}

const ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/** 32 letters and digits, as llama-server's completion ids (the gateway rewrites ids in place when
 * the lengths match). */
function idChars() {
  let s = "";
  for (const b of randomBytes(32)) s += ALNUM[b % ALNUM.length];
  return s;
}

function send(res, status, body) {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(text),
  });
  res.end(text);
}

function authorized(req) {
  return !apiKey || req.headers.authorization === `Bearer ${apiKey}`;
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const parts = [];
    req.on("data", (c) => parts.push(c));
    req.on("end", () => resolve(Buffer.concat(parts).toString("utf8")));
    req.on("error", reject);
  });
}

const usageOf = (prompt, n) => ({
  completion_tokens: n,
  prompt_tokens: prompt,
  total_tokens: prompt + n,
  prompt_tokens_details: { cached_tokens: 0 },
});
const timingsOf = (prompt, n, ms) => ({
  cache_n: 0,
  prompt_n: prompt,
  prompt_ms: 0.01,
  prompt_per_token_ms: 0.01 / Math.max(prompt, 1),
  prompt_per_second: 1e5,
  predicted_n: n,
  predicted_ms: ms,
  predicted_per_token_ms: ms / Math.max(n, 1),
  predicted_per_second: ms > 0 ? (n * 1000) / ms : 1e5,
});

/** About one prompt token per 4 bytes of the messages' text (nothing reads it exactly). */
function promptTokens(body) {
  const text = (body.messages ?? [])
    .map((m) => (typeof m.content === "string" ? m.content : ""))
    .join("");
  return Math.max(1, Math.ceil(((body.prompt ?? "").length + text.length) / 4));
}

async function complete(req, res, chat) {
  let body;
  try {
    body = JSON.parse(await readBody(req));
  } catch {
    return send(res, 400, {
      error: { code: 400, message: "invalid JSON", type: "invalid_request_error" },
    });
  }
  const n = Math.max(
    1,
    Number(body.max_tokens ?? body.max_completion_tokens ?? body.n_predict ?? 16),
  );
  const prompt = promptTokens(body);
  const id = `${chat ? "chatcmpl" : "cmpl"}-${idChars()}`;
  const created = Math.floor(Date.now() / 1000);
  const object = chat ? "chat.completion" : "text_completion";
  await acquire();
  const t0 = performance.now();
  processing++;
  if (!body.stream) {
    const finish = async () => {
      processing--;
      release();
      predicted += n;
      const text = tokenText.repeat(n);
      const choice = chat
        ? { finish_reason: "length", index: 0, message: { role: "assistant", content: text } }
        : { finish_reason: "length", index: 0, text };
      send(res, 200, {
        choices: [choice],
        created,
        model: alias,
        system_fingerprint: fingerprint,
        object,
        usage: usageOf(prompt, n),
        id,
        timings: timingsOf(prompt, n, performance.now() - t0),
      });
    };
    if (tps > 0) setTimeout(finish, (n * 1000) / tps);
    else void finish();
    return;
  }
  // Streaming: one write per event, as llama-server sends each token as soon as it is decoded.
  const tail = `,"created":${created},"id":"${id}","model":${JSON.stringify(alias)},"system_fingerprint":"${fingerprint}","object":"${chat ? "chat.completion.chunk" : "text_completion"}"`;
  const delta = chat
    ? `data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":${JSON.stringify(tokenText)}}}]${tail}}\n\n`
    : `data: {"choices":[{"finish_reason":null,"index":0,"text":${JSON.stringify(tokenText)}}]${tail}}\n\n`;
  const includeUsage = body.stream_options?.include_usage === true;
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  res.socket?.setNoDelay(true);
  if (chat)
    res.write(
      `data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}]${tail}}\n\n`,
    );
  let sent = 0;
  let closed = false;
  res.on("close", () => {
    if (sent < n) {
      closed = true;
      processing--;
      release();
    }
  });
  const end = () => {
    processing--;
    release();
    predicted += n;
    const ms = performance.now() - t0;
    const finishDelta = chat ? `"delta":{}` : `"text":""`;
    const extra = includeUsage
      ? ""
      : `,"usage":${JSON.stringify(usageOf(prompt, n))},"timings":${JSON.stringify(timingsOf(prompt, n, ms))}`;
    res.write(
      `data: {"choices":[{"finish_reason":"length","index":0,${finishDelta}}]${tail}${extra}}\n\n`,
    );
    if (includeUsage)
      res.write(
        `data: {"choices":[]${tail},"usage":${JSON.stringify(usageOf(prompt, n))},"timings":${JSON.stringify(timingsOf(prompt, n, ms))}}\n\n`,
      );
    res.end("data: [DONE]\n\n");
  };
  const pace = () => {
    if (closed) return;
    const due = tps > 0 ? Math.min(n, Math.floor(((performance.now() - t0) * tps) / 1000) + 1) : n;
    while (sent < due) {
      res.write(delta);
      sent++;
    }
    if (sent >= n) end();
    else setTimeout(pace, Math.max(0, (sent * 1000) / tps - (performance.now() - t0)));
  };
  pace();
}

function metrics() {
  return [
    "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.",
    "# TYPE llamacpp:tokens_predicted_total counter",
    `llamacpp:tokens_predicted_total ${predicted}`,
    "# HELP llamacpp:requests_processing Number of requests processing.",
    "# TYPE llamacpp:requests_processing gauge",
    `llamacpp:requests_processing ${processing}`,
    "# HELP llamacpp:requests_deferred Number of requests deferred.",
    "# TYPE llamacpp:requests_deferred gauge",
    `llamacpp:requests_deferred ${deferred.length}`,
    "",
  ].join("\n");
}

function handle(req, res) {
  const path = (req.url ?? "/").split("?")[0];
  if (req.method === "GET" && path === "/health") return send(res, 200, { status: "ok" });
  if (!authorized(req))
    return send(res, 401, {
      error: { message: "Invalid API Key", type: "authentication_error", code: 401 },
    });
  if (req.method === "GET" && path === "/metrics") {
    res.writeHead(200, { "content-type": "text/plain; version=0.0.4" });
    return res.end(metrics());
  }
  if (req.method === "GET" && (path === "/v1/models" || path === "/models"))
    return send(res, 200, {
      object: "list",
      data: [{ id: alias, object: "model", owned_by: "llamacpp" }],
    });
  if (req.method === "POST" && (path === "/v1/chat/completions" || path === "/chat/completions"))
    return void complete(req, res, true);
  if (req.method === "POST" && (path === "/v1/completions" || path === "/completions"))
    return void complete(req, res, false);
  send(res, 404, { error: { code: 404, message: "File Not Found", type: "not_found_error" } });
}

const tls = args["--ssl-key-file"] && args["--ssl-cert-file"];
const server = tls
  ? createHttps(
      { key: readFileSync(args["--ssl-key-file"]), cert: readFileSync(args["--ssl-cert-file"]) },
      handle,
    )
  : createHttp(handle);
server.keepAliveTimeout = 65_000;
server.listen(Number(args["--port"] ?? 8080), args["--host"] ?? "127.0.0.1", () => {
  const a = server.address();
  process.stderr.write(
    `main: server is listening on ${tls ? "https" : "http"}://${args["--host"] ?? "127.0.0.1"}:${a.port} (stand-in engine)\n`,
  );
});
for (const sig of ["SIGTERM", "SIGINT"])
  process.on(sig, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
