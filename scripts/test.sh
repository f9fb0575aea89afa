#!/usr/bin/env bash
# The whole test suite from a fresh machine: set-up (everything built), C++ tests (CTest), the
# black-box tests (pytest from .venv/) against the built binary, then the C++ suites again
# under AddressSanitizer + UBSan, the threaded ones under ThreadSanitizer, then each libFuzzer
# target (tests/fuzz) for a short while.
# Safe to run again. SKIP_SANITIZERS=1 leaves the ASan + UBSan stage out, SKIP_TSAN=1 the
# ThreadSanitizer stage, SKIP_FUZZ=1 the fuzz stage; FUZZ_SECONDS sets each target's run (15).
set -Eeuo pipefail
cd "$(dirname "$0")/.."
# CI (CI=true) compiles the CUDA kernels for Hopper alone (sm_90a; the default adds sm_80): no
# GPU runs them there, and the second architecture costs about 170 s of compiler time.
if [ "${CI:-}" = true ] && [ -z "${CMAKE_ARGS:-}" ]; then
  export CMAKE_ARGS="-DVLLM_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a"
fi
WITH_TEST_MODELS=1 scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}

STAGE=""
failed() {
  local rc=$?
  printf '\ntests FAILED in stage: %s (exit %s)\n' "$STAGE" "$rc" >&2
  exit "$rc"
}
trap failed ERR
# Each stage's start shows the seconds since the script began (set-up included), for CI's time.
stage() { STAGE=$1; printf '\n==> test: %s (at %s s)\n' "$1" "$SECONDS"; }

stage "C++ tests (ctest --test-dir $BUILD_DIR)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)"

stage "black-box tests (pytest tests/python)"
VLLM_CPP_BIN="$PWD/$BUILD_DIR/vllm-cpp" .venv/bin/python -m pytest -q tests/python

# The same C++ suites (minus the slow real-model ones: SmolLM2, Gemma-3, the MoE GGUFs,
# the 128 MiniLM embeddings) under AddressSanitizer + UBSan. They are built in the fuzz stage's
# tree (build-fuzz/: clang -O1, ASan + UBSan + libFuzzer's coverage), whose libraries the fuzz
# targets below share: one sanitizer build of the libraries, not two.
if [ "${SKIP_SANITIZERS:-0}" != 1 ]; then
  stage "sanitizer build (build-fuzz/, clang, CPU code only: the tests and the fuzz targets)"
  # nvcc takes no -fsanitize, and no GPU is there to run CUDA code anyway.
  FUZZ_BUILD_ONLY=1 FUZZ_EXTRA_TARGETS="test_runtime test_loader test_core test_model test_engine
    test_structured" scripts/fuzz.sh all 0
  stage "C++ tests under ASan + UBSan"
  export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  for t in test_runtime test_loader test_core; do build-fuzz/$t --gtest_brief=1; done
  build-fuzz/test_model --gtest_brief=1 --gtest_filter=\
'-SmolLM2*:Gemma3*:BatchInvariance*:*MoeGguf*:MiniLm.MatchesSentenceTransformers'
  build-fuzz/test_engine --gtest_brief=1 \
    --gtest_filter='TinyEngine*:AsyncEngine*:SlidingWindowEngine*:PoolingEngine.ModelErrors*:RemoteRanks*'
  # The grammar engine, and its masks on SmolLM2's vocabulary against the recorded walks (the
  # chained walks take minutes in a sanitized build).
  build-fuzz/test_structured --gtest_brief=1 --gtest_filter='-MaskOracle.LlguidanceChained*'
  unset ASAN_OPTIONS UBSAN_OPTIONS
fi

# The threads under ThreadSanitizer (build-tsan/): the engine tests that run threads (the
# async engine's loop, tensor-parallel ranks and their collectives, the node group's
# connections) and black-box server tests whose requests race each other and their clients'
# hang-ups, or whose ranks are processes, against a TSan-built server (a race report stops the
# server, and the test sees it die).
if [ "${SKIP_TSAN:-0}" != 1 ]; then
  stage "ThreadSanitizer build (build-tsan/, CPU code only)"
  # -g1: line tables for the race reports' stacks, without -g's full debug information.
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVLLM_TSAN=ON \
    -DVLLM_CUDA=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" >/dev/null
  cmake --build build-tsan -j "$(nproc)" --target vllm-cpp test_engine test_runtime
  stage "engine and server tests under ThreadSanitizer"
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp"
  build-tsan/test_runtime --gtest_brief=1 \
    --gtest_filter='Communicator/Collectives*:SocketCommunicator*:NodeGroup*'
  build-tsan/test_engine --gtest_brief=1 \
    --gtest_filter='AsyncEngine*:TensorParallelEngine*:TinyEngine.AbortFreesBlocksAtAnyPoint:TinyEngine.Cancelled*'
  VLLM_CPP_SANITIZER=thread VLLM_CPP_BIN="$PWD/build-tsan/vllm-cpp" .venv/bin/python -m pytest -q \
    tests/python/test_server_disconnect.py tests/python/test_soak.py \
    tests/python/test_tensor_parallel_nodes.py
  unset TSAN_OPTIONS
fi

# Each libFuzzer target (clang, ASan + UBSan, build-fuzz/) on its seed corpus for a short
# while; the long runs are in docs/reliability.md.
if [ "${SKIP_FUZZ:-0}" != 1 ]; then
  stage "fuzz targets (scripts/fuzz.sh all ${FUZZ_SECONDS:-15})"
  scripts/fuzz.sh all "${FUZZ_SECONDS:-15}"
fi
printf '\n==> test: all stages passed (%s s)\n' "$SECONDS"
