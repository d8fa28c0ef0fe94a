#!/usr/bin/env bash
# The GPU check on a machine with an NVIDIA GPU and no node, nats-server or network: unpacks what
# bench/gpu/pack.sh put in .gpu/ (only what is missing), makes the CUDA libraries findable for the
# engine build, and runs bench/gpu/main.ts, which builds the engine with the project's own script.
# Everything it prints goes to $OUT/gpu-check.log too, the section to $OUT/benchmarks.md.
# Usage (repo root): OUT=/some/dir bash bench/gpu/run.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PACK=${GPU_PACK:-$ROOT/.gpu}
OUT=${OUT:-/tmp/gpu-check-out}
W=${GPU_CHECK_WORK:-/tmp/gpu-check}
mkdir -p "$OUT" "$W/bin"
exec > >(tee -a "$OUT/gpu-check.log") 2>&1
cd "$ROOT" || exit 1
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && PATH=$PATH:$d; done
command -v node >/dev/null || tar -xJf "$PACK/node.tar.xz" -C "$W/bin"
command -v nats-server >/dev/null || tar -xJf "$PACK/nats.tar.xz" -C "$W/bin"
export PATH=$W/bin:$PATH
[ -d node_modules/.pnpm ] || tar -xJf "$PACK/modules.tar.xz" -C "$ROOT"
ENGINE_ROOT=${ENGINE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inference-cluster/engine}
mkdir -p "$ENGINE_ROOT/src"
# The pruned source only where there is none: a machine that has the project's bundle keeps it
# (and the engine built from it).
if [ -f "$PACK/llama.bundle" ] && [ ! -f "$ENGINE_ROOT/src/node-llama-cpp-3.22.1.bundle" ]; then
  cp -f "$PACK/llama.bundle" "$ENGINE_ROOT/src/node-llama-cpp-3.22.1.bundle"
fi
echo "node $(node --version), $(nats-server --version), nvcc: $(command -v nvcc || echo none)"
timeout 20 nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version,compute_cap --format=csv 2>&1

# cuBLAS and the driver library, for llama.cpp's CUDA configure: taken from where they are when the
# toolkit itself lacks them (a toolkit assembled from pip wheels), through a shim directory.
if command -v nvcc >/dev/null; then
  shim=$W/cudashim
  mkdir -p "$shim/lib" "$shim/include"
  have() { ldconfig -p 2>/dev/null | grep -q "$1 " || ls /usr/local/cuda/lib64/$1 /usr/local/cuda/targets/*/lib/$1 >/dev/null 2>&1; }
  if ! have libcublas.so; then
    f=$(find /usr /opt /root -xdev -name 'libcublas.so.[0-9]*' 2>/dev/null | sort -V | tail -1)
    [ -n "$f" ] && ln -sf "$f" "$shim/lib/libcublas.so" && ln -sf "$(dirname "$f")"/libcublasLt.so.* "$shim/lib/" 2>/dev/null
    f=$(find /usr /opt /root -xdev -name 'libcublasLt.so.[0-9]*' 2>/dev/null | sort -V | tail -1)
    [ -n "$f" ] && ln -sf "$f" "$shim/lib/libcublasLt.so"
  fi
  if [ ! -f /usr/local/cuda/include/cublas_v2.h ] && ! ls /usr/local/cuda/targets/*/include/cublas_v2.h >/dev/null 2>&1; then
    h=$(find /usr /opt /root -xdev -name cublas_v2.h 2>/dev/null | head -1)
    [ -n "$h" ] && ln -sf "$(dirname "$h")"/cublas*.h "$shim/include/"
  fi
  if ! have libcuda.so; then
    f=$(ldconfig -p 2>/dev/null | grep 'libcuda.so.1 ' | head -1 | awk '{print $NF}')
    [ -n "$f" ] && ln -sf "$f" "$shim/lib/libcuda.so"
  fi
  export CMAKE_LIBRARY_PATH=$shim/lib${CMAKE_LIBRARY_PATH:+:$CMAKE_LIBRARY_PATH}
  export LIBRARY_PATH=$shim/lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$shim/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export CPLUS_INCLUDE_PATH=$shim/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}
  echo "cuda shim: $(ls "$shim/lib" "$shim/include" 2>/dev/null | tr '\n' ' ')"
fi

export BENCH_REPORT=${BENCH_REPORT:-$OUT/benchmarks.md}
export OUT
timeout -k 10 "${GPU_CHECK_TIMEOUT_S:-560}" node --import tsx bench/gpu/main.ts
rc=$?
# The engine's build log tail and the node logs, for reading when something failed.
b=$(ls -td "$ENGINE_ROOT"/*-*/ 2>/dev/null | head -1)
[ -n "$b" ] && tail -n 60 "$b/build.log" >"$OUT/build.log.tail" 2>/dev/null
echo "gpu check exit $rc"
exit $rc
