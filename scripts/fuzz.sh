#!/usr/bin/env bash
# Builds one libFuzzer target of tests/fuzz (clang, ASan + UBSan, into build-fuzz/) and runs it
# for SECONDS on its seed corpus. Usage:
#   scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]   e.g. scripts/fuzz.sh fuzz_http 60
#   scripts/fuzz.sh all SECONDS                           each target in turn, SECONDS each
#   scripts/fuzz.sh list                                  the targets
# New inputs go to build-fuzz/corpus/TARGET (the committed seeds in tests/fuzz/corpus/TARGET
# are read, never written); a crash, leak or timeout leaves its input in
# build-fuzz/artifacts/TARGET/ and exits non-zero. Reproduce one with
#   build-fuzz/TARGET FILE
# FUZZ_BUILD_DIR (build-fuzz), FUZZ_JOBS (build jobs: nproc) and FUZZ_BUILD_ONLY=1 adjust it;
# FUZZ_EXTRA_TARGETS (a list) builds more targets of the same tree (scripts/test.sh: the tests).
# FUZZ_SANITIZE=undefined builds UBSan alone at -O2 into build-fuzz-ubsan/ (several times the
# executions a second, for long runs; the corpus directory is the same): replay what such a
# run found under ASan afterwards with  build-fuzz/TARGET -runs=0 build-fuzz/corpus/TARGET
set -Eeuo pipefail
cd "$(dirname "$0")/.."
TARGETS=(fuzz_request_json fuzz_http fuzz_jinja fuzz_tokenizer fuzz_detokenizer fuzz_gguf
  fuzz_safetensors)
SANITIZE=${FUZZ_SANITIZE:-address,undefined}
case "$SANITIZE" in
address,undefined) BUILD=${FUZZ_BUILD_DIR:-build-fuzz}; OPT=-O1 ;;
undefined) BUILD=${FUZZ_BUILD_DIR:-build-fuzz-ubsan}; OPT=-O2 ;;
*) echo "fuzz.sh: FUZZ_SANITIZE is address,undefined or undefined" >&2; exit 2 ;;
esac
CORPUS=${FUZZ_BUILD_DIR:-build-fuzz}/corpus  # both sanitizer builds share the default one

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
target=$1
if [ "$target" = list ]; then printf '%s\n' "${TARGETS[@]}"; exit 0; fi
[ $# -ge 2 ] || usage
seconds=$2
shift 2
if [ "$target" = all ]; then
  selected=("${TARGETS[@]}")
elif printf '%s\n' "${TARGETS[@]}" | grep -qx "$target"; then
  selected=("$target")
else
  echo "fuzz.sh: unknown target '$target' (scripts/fuzz.sh list)" >&2
  exit 2
fi

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/setup.sh installs clang)" >&2; exit 1; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# -O1 and line tables (enough for symbolized reports, a fraction of -g's compile time): the
# usual fuzzing trade of speed for readable reports; assertions stay on. The lock
# lets several fuzz.sh runs (one per core) share the build directory.
mkdir -p "$BUILD"
exec 9>"$BUILD/.fuzz-build.lock"
flock 9
# The GoogleTest suites are configured too (not built unless asked): scripts/test.sh runs them
# from this build under ASan + UBSan, sharing its libraries with the fuzz targets.
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DVLLM_FUZZ=ON -DVLLM_CUDA=OFF \
  -DVLLM_FUZZ_SANITIZERS="$SANITIZE" -DVLLM_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$OPT -gline-tables-only" "${launcher[@]}" >/dev/null
nice cmake --build "$BUILD" -j "${FUZZ_JOBS:-$(nproc)}" --target "${selected[@]}" \
  ${FUZZ_EXTRA_TARGETS:+$FUZZ_EXTRA_TARGETS}
flock -u 9
[ "${FUZZ_BUILD_ONLY:-0}" = 1 ] && exit 0

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for t in "${selected[@]}"; do
  corpus="$CORPUS/$t" artifacts="$BUILD/artifacts/$t"
  mkdir -p "$corpus" "$artifacts" "tests/fuzz/corpus/$t"
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  printf '==> fuzz: %s for %s s\n' "$t" "$seconds"
  # -timeout: an input that takes 10 s is a finding (a hang); -rss_limit_mb likewise.
  set +e
  nice "$BUILD/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" "$@" \
    "$corpus" "tests/fuzz/corpus/$t" 2>&1 |
    grep --line-buffered -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)'
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" != 0 ]; then
    echo "fuzz.sh: $t failed (exit $rc); the input is in $artifacts/" >&2
    exit "$rc"
  fi
done
