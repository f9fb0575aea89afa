#!/usr/bin/env bash
# The whole test suite from a fresh machine: set-up, C++ tests (CTest) and black-box tests
# (pytest) against the built binary. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)"
VLLM_CPP_BIN="$PWD/$BUILD_DIR/vllm-cpp" python3 -m pytest -q tests/python
