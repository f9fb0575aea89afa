#!/usr/bin/env bash
# The whole test suite from a fresh machine: set-up, C++ tests (CTest) and black-box tests
# (pytest) against the built binary. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)"
VLLM_CPP_BIN="$PWD/$BUILD_DIR/vllm-cpp" python3 -m pytest -q tests/python

# The same C++ suites (minus the slow real-model ones) under AddressSanitizer + UBSan.
# SKIP_SANITIZERS=1 leaves this stage out for a quick local run.
if [ "${SKIP_SANITIZERS:-0}" != 1 ]; then
  # CPU code only: nvcc takes no -fsanitize, and no GPU is there to run CUDA code anyway.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DVLLM_SANITIZE=ON -DVLLM_CUDA=OFF >/dev/null
  cmake --build build-asan -j "$(nproc)" --target test_runtime test_loader test_core test_model test_engine
  for t in test_runtime test_loader test_core; do build-asan/$t --gtest_brief=1; done
  build-asan/test_model --gtest_brief=1 --gtest_filter='-SmolLM2*'
  build-asan/test_engine --gtest_brief=1 --gtest_filter='TinyEngine*:AsyncEngine*:SlidingWindowEngine*'
fi
