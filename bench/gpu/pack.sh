#!/usr/bin/env bash
# Packs what the GPU check needs on a machine without node, nats-server or network into .gpu/
# (ignored; under 64 MiB): this machine's node binary, nats-server, the installed node_modules
# without the dev-only tools (typecheck, lint, tests, build), and a pruned git bundle of the
# llama.cpp source the project builds (the same commit's files minus docs, examples, tests, models,
# the web UI sources and the GPU backends other than CUDA). bench/gpu/run.sh unpacks them there.
# Usage (repo root, after `npm test` or `npm start` installed everything): bash bench/gpu/pack.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=.gpu
rm -rf "$OUT"
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

cp "$(readlink -f "$(command -v node)")" "$WORK/node"
tar -C "$WORK" -cJf "$OUT/node.tar.xz" node
cp "$(readlink -f "$(command -v nats-server)")" "$WORK/nats-server"
tar -C "$WORK" -cJf "$OUT/nats.tar.xz" nats-server

# Every node_modules of the workspace (pnpm links them into node_modules/.pnpm).
mapfile -t dirs < <(ls -d node_modules packages/*/node_modules services/*/node_modules bench/node_modules 2>/dev/null)
tar -cJf "$OUT/modules.tar.xz" \
  --exclude='node_modules/.pnpm/typescript@*' --exclude='node_modules/.pnpm/eslint*' \
  --exclude='node_modules/.pnpm/@typescript-eslint*' --exclude='node_modules/.pnpm/@eslint*' \
  --exclude='node_modules/.pnpm/knip@*' --exclude='node_modules/.pnpm/prettier@*' \
  --exclude='node_modules/.pnpm/vitest@*' --exclude='node_modules/.pnpm/@vitest*' \
  --exclude='node_modules/.pnpm/turbo@*' --exclude='node_modules/.pnpm/@turbo*' \
  --exclude='node_modules/.pnpm/vite@*' --exclude='node_modules/.pnpm/rollup@*' \
  --exclude='node_modules/.pnpm/@rollup*' --exclude='node_modules/.pnpm/*oxc*' \
  --exclude='node_modules/.pnpm/jiti@*' --exclude='node_modules/.pnpm/@types+*' \
  --exclude='node_modules/.pnpm/fast-check@*' --exclude='node_modules/.cache' \
  "${dirs[@]}"

# The llama.cpp source, pruned, as a git bundle at one commit.
ENGINE_ROOT=${ENGINE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inference-cluster/engine}
BUNDLE=$(ls "$ENGINE_ROOT"/src/node-llama-cpp-*.bundle | head -1)
git -c advice.detachedHead=false clone --quiet "$BUNDLE" "$WORK/llama"
(
  cd "$WORK/llama"
  git rm -r --quiet --ignore-unmatch docs examples models media gguf-py tests tools/server/webui \
    ggml/src/ggml-vulkan ggml/src/ggml-sycl ggml/src/ggml-cann ggml/src/ggml-musa \
    ggml/src/ggml-opencl ggml/src/ggml-hip ggml/src/ggml-kompute ggml/src/ggml-webgpu \
    ggml/src/ggml-zdnn ggml/src/ggml-metal ggml/src/ggml-hexagon ggml/src/ggml-openvino
  # One commit without history: the bundle holds only the pruned tree.
  git checkout --quiet --orphan gpu-check
  git -c user.name=gpu-check -c user.email=gpu-check@localhost commit --quiet -m "pruned for the GPU check"
  git bundle create --quiet "$WORK/llama.bundle" HEAD
)
cp "$WORK/llama.bundle" "$OUT/llama.bundle"
ls -l "$OUT"
du -sh "$OUT"
