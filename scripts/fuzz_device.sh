#!/usr/bin/env bash
# Long fuzzing runs on the GPU machine's cores (16 there against 2 here). Two halves:
#   scripts/fuzz_device.sh pack TARGET...         here: builds the targets (scripts/fuzz.sh's
#       build-fuzz/) and packs them, the shared libraries they need, the shared tokenizers they
#       read and their corpora (committed seeds + build-fuzz/corpus) into .device/fuzz.tar.xz
#       (name .device in the device tool's `carry`)
#   scripts/fuzz_device.sh run SECONDS TARGET...  there: each target in libFuzzer's fork mode
#       with one job per core for SECONDS, a crash, timeout or out-of-memory stopping it; logs
#       and each target's new corpus under $OUT (default out/)
# The executions and findings of each run are the last status line of $OUT/fuzz_TARGET.log
# ("#N: ... oom/timeout/crash: 0/0/0"); docs/reliability.md has the figures.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in
pack)
  shift
  [ $# -ge 1 ] || { echo "usage: $0 pack TARGET..." >&2; exit 2; }
  for t in "$@"; do FUZZ_BUILD_ONLY=1 scripts/fuzz.sh "$t" 1; done
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage"/fuzz/bin "$stage"/fuzz/lib "$stage"/fuzz/shared/tokenizers "$stage"/fuzz/corpus
  for t in "$@"; do
    cp build-fuzz/"$t" "$stage"/fuzz/bin/
    mkdir -p "$stage"/fuzz/corpus/"$t"
    if [ -d build-fuzz/corpus/"$t" ]; then cp -r build-fuzz/corpus/"$t"/. "$stage"/fuzz/corpus/"$t"/; fi
    # The shared libraries outside glibc and the C++ runtime, which the GPU machine has.
    ldd build-fuzz/"$t" | awk '/=> \// {print $3}' |
      grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so' |
      xargs -r -I{} cp -L {} "$stage"/fuzz/lib/
  done
  for tok in llama2 llama3 qwen3; do
    cp -r ../shared/tokenizers/"$tok" "$stage"/fuzz/shared/tokenizers/
  done
  mkdir -p .device
  tar -C "$stage" -cf - fuzz | xz -T0 -6 > .device/fuzz.tar.xz
  du -sh .device/fuzz.tar.xz
  ;;
run)
  shift
  [ $# -ge 2 ] || { echo "usage: $0 run SECONDS TARGET..." >&2; exit 2; }
  seconds=$1
  shift
  OUT=${OUT:-out}
  mkdir -p "$OUT"
  work=$(mktemp -d)
  tar -C "$work" -xJf .device/fuzz.tar.xz
  export LD_LIBRARY_PATH="$work/fuzz/lib:${LD_LIBRARY_PATH:-}"
  export VLLM_FUZZ_SHARED="$work/fuzz/shared"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  jobs=$(nproc)
  status=0
  for t in "$@"; do
    corpus="$work/fuzz/corpus/$t"
    mkdir -p "$corpus" "$OUT/artifacts/$t"
    dict=()
    [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
    echo "==> fuzz: $t, $jobs jobs, $seconds s"
    # Fork mode ignores timeouts and out-of-memory by default; here they are findings too, with
    # the limits of scripts/fuzz.sh's long runs.
    set +e
    "$work/fuzz/bin/$t" -fork="$jobs" -ignore_timeouts=0 -ignore_ooms=0 -ignore_crashes=0 \
      -max_total_time="$seconds" -timeout=60 -rss_limit_mb=2560 -print_final_stats=1 \
      -artifact_prefix="$OUT/artifacts/$t/" "${dict[@]}" "$corpus" "tests/fuzz/corpus/$t" \
      > "$OUT/fuzz_$t.log" 2>&1
    rc=$?
    set -e
    grep -E '^#[0-9]+:' "$OUT/fuzz_$t.log" | tail -1
    echo "$t: exit $rc, corpus $(find "$corpus" -type f | wc -l) inputs"
    [ "$rc" = 0 ] || status=1
  done
  exit "$status"
  ;;
*)
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
  ;;
esac
