#!/usr/bin/env bash
# Long fuzzing runs on the GPU machine's cores (16 there against 2 here). Two halves:
#   scripts/fuzz_device.sh pack TARGET...         here: builds the targets (scripts/fuzz.sh's
#       build-fuzz/) and packs them, the shared libraries they need, the shared tokenizers they
#       read and their corpora (committed seeds + build-fuzz/corpus) into .device/fuzz.tar.xz
#       (name .device in the device tool's `carry`); FUZZ_SANITIZE=undefined packs the faster
#       UBSan-only build (build-fuzz-ubsan/; replay its corpora under ASan here afterwards)
#   scripts/fuzz_device.sh run SECONDS TARGET[:WORKERS]...  there: all the targets at once,
#       each as WORKERS independent fuzzing processes (default 1) sharing FUZZ_RUNS executions
#       (10,000,000) for at most SECONDS; under $OUT (default out/), one archive a target of
#       its workers' logs and its artifacts (logs_TARGET.tar.xz: the device tool returns at most
#       8 files) and its grown corpus (corpus_TARGET.tar.xz)
# It prints each target's executions (summed over its workers), findings (crash, leak,
# timeout, out-of-memory) and slow units (libFuzzer's slow-unit-*, over 10 s);
# docs/reliability.md has the figures.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in
pack)
  shift
  [ $# -ge 1 ] || { echo "usage: $0 pack TARGET..." >&2; exit 2; }
  for t in "$@"; do FUZZ_BUILD_ONLY=1 scripts/fuzz.sh "$t" 1; done
  bin=build-fuzz
  [ "${FUZZ_SANITIZE:-address,undefined}" = undefined ] && bin=build-fuzz-ubsan
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage"/fuzz/bin "$stage"/fuzz/lib "$stage"/fuzz/shared/tokenizers "$stage"/fuzz/corpus
  for t in "$@"; do
    cp "$bin/$t" "$stage"/fuzz/bin/
    mkdir -p "$stage"/fuzz/corpus/"$t"
    if [ -d build-fuzz/corpus/"$t" ]; then cp -r build-fuzz/corpus/"$t"/. "$stage"/fuzz/corpus/"$t"/; fi
    # The shared libraries outside glibc and the C++ runtime, which the GPU machine has.
    ldd "$bin/$t" | awk '/=> \// {print $3}' |
      grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so' |
      xargs -r -I{} cp -L {} "$stage"/fuzz/lib/
  done
  for tok in llama2 llama3 qwen3; do
    cp -r ../shared/tokenizers/"$tok" "$stage"/fuzz/shared/tokenizers/
  done
  echo "${FUZZ_SANITIZE:-address,undefined}" > "$stage"/fuzz/SANITIZE
  mkdir -p .device
  tar -C "$stage" -cf - fuzz | xz -T0 -6 > .device/fuzz.tar.xz
  du -sh .device/fuzz.tar.xz
  ;;
run)
  shift
  [ $# -ge 2 ] || { echo "usage: $0 run SECONDS TARGET[:WORKERS]..." >&2; exit 2; }
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
  runs=${FUZZ_RUNS:-10000000}
  echo "==> sanitizers of the packed build: $(cat "$work/fuzz/SANITIZE" 2>/dev/null || echo address,undefined)"
  # Every target at once, each as WORKERS independent libFuzzer processes sharing one corpus
  # directory (each rereads the inputs the others add), each running to its share of the
  # executions or to SECONDS, timeouts and out-of-memory being findings as in scripts/fuzz.sh's
  # long runs. (Fork mode restarts its jobs every few seconds, and the tokenizer targets load
  # their tokenizers at each start: 16 jobs gave 3-8 times one core.)
  pids=()
  for spec in "$@"; do
    t=${spec%%:*}
    workers=1
    [ "$spec" != "$t" ] && workers=${spec#*:}
    corpus="$work/fuzz/corpus/$t"
    mkdir -p "$corpus" "$work/logs_$t/artifacts"
    dict=()
    [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
    each=$(( (runs + workers - 1) / workers ))
    echo "==> fuzz: $t, $workers workers, $seconds s, $each runs each"
    for w in $(seq 1 "$workers"); do
      "$work/fuzz/bin/$t" -runs="$each" -max_total_time="$seconds" -timeout=60 \
        -rss_limit_mb=2560 -print_final_stats=1 \
        -artifact_prefix="$work/logs_$t/artifacts/" "${dict[@]}" "$corpus" \
        "tests/fuzz/corpus/$t" > "$work/logs_$t/fuzz_${t}_$w.log" 2>&1 &
      pids+=($!)
    done
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  status=0
  for spec in "$@"; do
    t=${spec%%:*}
    # Executions summed over the workers' final statistics; findings are the artifacts.
    logs="$work/logs_$t"
    execs=$(cat "$logs"/fuzz_*.log |
      awk '/stat::number_of_executed_units/ {s += $NF} END {print s + 0}')
    findings=$(find "$logs/artifacts" -type f ! -name 'slow-unit-*' | wc -l)
    slow=$(find "$logs/artifacts" -type f -name 'slow-unit-*' | wc -l)
    inputs=$(find "$work/fuzz/corpus/$t" -type f | wc -l)
    echo "$t: $execs executions, $findings findings, $slow slow units, corpus $inputs inputs"
    [ "$findings" = 0 ] || status=1
    tar -C "$logs" -cf - . | xz -T0 -3 > "$OUT/logs_$t.tar.xz"
    tar -C "$work/fuzz/corpus/$t" -cf - . | xz -T0 -3 > "$OUT/corpus_$t.tar.xz"
  done
  exit "$status"
  ;;
*)
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
  ;;
esac
