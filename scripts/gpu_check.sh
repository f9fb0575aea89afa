#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, over binaries packed by
# scripts/gpu_pack.sh: the CUDA op and model tests, then the benchmarks of docs/benchmarks.md.
# Results: $OUT/gpu_results.jsonl (one JSON object per figure) and logs under $OUT.
#   scripts/gpu_check.sh [stage...]   stages: tests models latency hf throughput profile kv tp
#   nodes (default: all but profile, kv, tp and nodes; kv needs SHAPES=gemma3-4b made by the
#   models stage; tp needs two GPUs and TP_MODEL, default llama-8b, made by the models stage;
#   nodes runs two processes over NCCL, NODES_MODEL default fixtures/tiny/llama)
# Environment: SHAPES (models), LATENCY_MODELS and HF_MODELS (default: llama-1b llama-8b),
# THROUGHPUT_MODELS (default: llama-8b), NUM_PROMPTS, OUTPUT_LENS, THROUGHPUT_TIMEOUT,
# THROUGHPUT_FLAGS, PROFILE_MODEL, PROFILE_LAUNCHES, PROFILE_PREFILL (a prompt length: profile
# that one prefill step instead of decode).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
BIN=.device/bin
[ -x $BIN/vllm-cpp ] || tar -xJf .device/device.tar.xz  # packed by scripts/gpu_pack.sh
export LD_LIBRARY_PATH="$PWD/.device/lib:${LD_LIBRARY_PATH:-}"
# NCCL (opened with dlopen by the tensor-parallel communicator): PyTorch's copy where the
# system has none.
if nccl_lib=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0] + '/lib')" 2>/dev/null); then
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccl_lib"
fi
MODELS=${MODELS:-/tmp/models}
RESULTS="$OUT/gpu_results.jsonl"
STAGES=${*:-tests models latency throughput hf}
log() { echo "== $(date +%T) $*"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"

if has tests; then
  log tests
  $BIN/test_runtime --gtest_filter='Cuda*:Nccl*' 2>&1 | tee "$OUT/test_runtime.log" | tail -25
  # The GEMV's sliced path forced to each slice count, so that every count meets every shape
  # (the test binary's knob; the engine's is --gemv-slices).
  for s in 2 4 8; do
    echo "VLLM_TEST_GEMV_SLICES=$s"
    VLLM_TEST_GEMV_SLICES=$s $BIN/test_runtime --gtest_filter='CudaOps.*' 2>&1 | tail -3
  done
  $BIN/test_model --gtest_filter='*cuda*:*Cuda*:Fp8Gpu.*' 2>&1 | tee "$OUT/test_model.log" | tail -25
  $BIN/test_engine --gtest_filter='Cuda*' 2>&1 | tee "$OUT/test_engine.log" | tail -8
fi

if has models; then
  log models
  python3 tools/make_gpu_bench_models.py --out "$MODELS" --tokenizer .device/tokenizer --shapes "${SHAPES:-1b,8b}" \
    | tee -a "$RESULTS"
fi

if has latency; then
  log latency
  python3 tools/bench_hf_decode.py --copy-bandwidth | tee -a "$RESULTS"
  for m in ${LATENCY_MODELS:-llama-1b llama-8b}; do
    [ -d "$MODELS/$m" ] || continue
    start=$(python3 -c "import time; print(time.time())")
    $BIN/vllm-cpp generate --device cuda -m "$MODELS/$m" --max-tokens 1 -q "Hello" > /dev/null
    end=$(python3 -c "import time; print(time.time())")
    echo "{\"engine\": \"vllm-cpp\", \"model\": \"$m\", \"process_to_first_token_s\": $(python3 -c "print(round($end - $start, 3))")}" | tee -a "$RESULTS"
    # Graph replay must give the eager tokens.
    for eager in "" --enforce-eager; do
      $BIN/vllm-cpp generate --device cuda -m "$MODELS/$m" --max-tokens 48 --ignore-eos -q $eager \
        "The capital of France is" > "$OUT/gen_${m}${eager}.txt"
    done
    cmp -s "$OUT/gen_${m}.txt" "$OUT/gen_${m}--enforce-eager.txt" && echo "{\"model\": \"$m\", \"graphs_match_eager\": true}" | tee -a "$RESULTS" \
      || echo "{\"model\": \"$m\", \"graphs_match_eager\": false}" | tee -a "$RESULTS"
    for eager in "" --enforce-eager; do
      $BIN/vllm-cpp bench latency --device cuda -m "$MODELS/$m" --input-len 128 --output-len 256 \
        --repeats 3 $eager | sed "s/^{/{\"model\": \"$m\", \"flags\": \"$eager\", /" | tee -a "$RESULTS"
    done
  done
fi

if has throughput; then
  log throughput
  # OUTPUT_LENS="1 128" also times the prefill alone.
  for m in ${THROUGHPUT_MODELS:-llama-8b}; do
    for olen in ${OUTPUT_LENS:-128}; do
      timeout "${THROUGHPUT_TIMEOUT:-500}" python3 tools/bench_gpu_throughput.py --bin $BIN/vllm-cpp \
        --model "$MODELS/$m" --num-prompts "${NUM_PROMPTS:-1000}" --input-len 1024 \
        --output-len "$olen" ${THROUGHPUT_FLAGS:-} 2>"$OUT/throughput_${m}_$olen.log" \
        | sed "s/^{/{\"model\": \"$m\", /" | tee -a "$RESULTS"
    done
  done
fi
if has profile; then
  # Per-kernel times of eager decode (kernels serialised): PROFILE_MODEL, PROFILE_LAUNCHES; or,
  # with PROFILE_PREFILL=N, of N-token prefill steps: the prompt's, and the start-up's memory
  # profile step of the same size (its tokens all id 0).
  log profile
  m=${PROFILE_MODEL:-llama-1b}
  if [ -n "${PROFILE_PREFILL:-}" ]; then
    prompt=$(python3 -c "print('[' + ','.join(str(100 + i * 7 % 90000) for i in range(${PROFILE_PREFILL})) + ']')")
    printf '{"prompt": %s, "max_tokens": 1}\n' "$prompt" > "$OUT/prefill_prompt.jsonl"
    ncu --csv --print-units base --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
      $BIN/vllm-cpp generate --device cuda -m "$MODELS/$m" --enforce-eager \
      --max-num-batched-tokens "$PROFILE_PREFILL" --input "$OUT/prefill_prompt.jsonl" --output "$OUT/prefill_out.jsonl" \
      2>"$OUT/profile_prefill_$m.log" | python3 tools/ncu_summary.py | tee "$OUT/profile_prefill_$m.txt"
  else
    ncu --csv --print-units base --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum --launch-skip 2000 \
      --launch-count "${PROFILE_LAUNCHES:-1000}" \
      $BIN/vllm-cpp generate --device cuda -m "$MODELS/$m" --max-tokens 40 --ignore-eos -q \
      --enforce-eager "Hello" 2>"$OUT/profile_$m.log" | python3 tools/ncu_summary.py | tee "$OUT/profile_$m.txt"
  fi
fi
if has kv; then
  # KV cache capacity of the Gemma-3-4B shape at 8k context, hybrid groups against every
  # layer keeping its blocks, in the same budget: the startup summary of an offline run.
  log kv
  m=gemma3-4b
  printf '{"prompt": "Hello", "max_tokens": 8}\n' > "$OUT/kv_prompts.jsonl"
  for flag in "" --disable-hybrid-kv-cache-manager; do
    $BIN/vllm-cpp generate --device cuda -m "$MODELS/$m" --input "$OUT/kv_prompts.jsonl" \
      --output "$OUT/kv_out.jsonl" --max-model-len 8192 --kv-cache-memory "${KV_BUDGET:-16GiB}" \
      $flag 2>&1 | grep "KV cache size" | sed "s/^/$m ${flag:-hybrid}: /" | tee -a "$OUT/kv.txt"
  done
fi
if has hf; then
  log hf
  for m in ${HF_MODELS:-llama-1b llama-8b}; do
    [ -d "$MODELS/$m" ] || continue
    timeout 400 python3 tools/bench_hf_decode.py --model "$MODELS/$m" --input-len 128 \
      --output-len 256 2>"$OUT/hf_$m.log" | tee -a "$RESULTS"
  done
fi


if has tp; then
  log "tp (tensor parallel over $(nvidia-smi -L | wc -l) GPUs)"
  m=${TP_MODEL:-llama-8b}
  # The same greedy tokens at TP=1 and TP=2 for a few prompts, then one sequence's decode
  # speed (1 prompt of 128 tokens, 256 out) and the offline throughput at each size.
  python3 - "$OUT/tp_in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i, p in enumerate(["The capital of France is", "def fibonacci(n):", "Once upon a time"]):
        f.write(json.dumps({"prompt": p, "max_tokens": 48, "temperature": 0,
                            "ignore_eos": True}) + "\n")
PY
  for tp in 1 2; do
    $BIN/vllm-cpp generate --device cuda -m "$MODELS/$m" --tensor-parallel-size $tp \
      --input "$OUT/tp_in.jsonl" --output "$OUT/tp_out_$tp.jsonl" --max-model-len 512 \
      2> "$OUT/tp_gen_$tp.log" || tail -5 "$OUT/tp_gen_$tp.log"
  done
  cmp -s "$OUT/tp_out_1.jsonl" "$OUT/tp_out_2.jsonl" \
    && echo "{\"model\": \"$m\", \"tp2_tokens_match_tp1\": true}" | tee -a "$RESULTS" \
    || echo "{\"model\": \"$m\", \"tp2_tokens_match_tp1\": false}" | tee -a "$RESULTS"
  for tp in 1 2; do
    timeout "${THROUGHPUT_TIMEOUT:-500}" python3 tools/bench_gpu_throughput.py --bin $BIN/vllm-cpp \
      --model "$MODELS/$m" --num-prompts 1 --input-len 128 --output-len 256 \
      --tensor-parallel-size $tp 2>"$OUT/tp_decode_$tp.log" \
      | sed "s/^{/{\"model\": \"$m\", \"figure\": \"one sequence\", /" | tee -a "$RESULTS"
    timeout "${THROUGHPUT_TIMEOUT:-500}" python3 tools/bench_gpu_throughput.py --bin $BIN/vllm-cpp \
      --model "$MODELS/$m" --num-prompts "${NUM_PROMPTS:-1000}" --input-len 1024 --output-len 128 \
      --tensor-parallel-size $tp 2>"$OUT/tp_throughput_$tp.log" \
      | sed "s/^{/{\"model\": \"$m\", /" | tee -a "$RESULTS"
  done
fi

if has nodes; then
  log "nodes (two processes, one rank each, over NCCL)"
  # Tensor parallel across processes as across hosts: node 1 started first, both joined over
  # NCCL with its shared-memory and P2P transports off (the socket path separate hosts take).
  # With two GPUs each process has its own and the tokens must be one process's (TP=1); with
  # one, both take it, NCCL refuses a GPU twice, and both must end with that error, not hang.
  m=${NODES_MODEL:-fixtures/tiny/llama}
  gpus=$(nvidia-smi -L | wc -l)
  dev1=cuda; [ "$gpus" -ge 2 ] && dev1=cuda:1
  python3 -c 'import json
for i in range(8): print(json.dumps({"prompt": list(range(1 + i, 20 + 3 * i)), "max_tokens": 32, "temperature": 0}))' > "$OUT/nodes_in.jsonl"
  common=(generate -m "$m" --input "$OUT/nodes_in.jsonl" --kv-cache-memory 256MiB)
  $BIN/vllm-cpp "${common[@]}" --device cuda --output "$OUT/nodes_tp1.jsonl" 2> "$OUT/nodes_tp1.log"
  two=(--tensor-parallel-size 2 --nnodes 2 --master-port 29517)
  NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 timeout 300 $BIN/vllm-cpp "${common[@]}" "${two[@]}" \
    --device $dev1 --node-rank 1 --output /dev/null > "$OUT/nodes_1.log" 2>&1 &
  node1=$!
  NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 timeout 300 $BIN/vllm-cpp "${common[@]}" "${two[@]}" \
    --device cuda --node-rank 0 --output "$OUT/nodes_tp2.jsonl" > "$OUT/nodes_0.log" 2>&1
  rc0=$?
  wait $node1
  rc1=$?
  same=$(python3 -c 'import json, sys
ids = [[json.loads(l)["token_ids"] for l in open(f)] for f in sys.argv[1:]]
print("true" if ids[0] == ids[1] else "false")' "$OUT/nodes_tp1.jsonl" "$OUT/nodes_tp2.jsonl" 2>/dev/null || echo null)
  echo "{\"stage\": \"nodes\", \"gpus\": $gpus, \"exit\": [$rc0, $rc1], \"tokens_match_tp1\": $same}" | tee -a "$RESULTS"
  tail -3 "$OUT/nodes_0.log" "$OUT/nodes_1.log"
fi

log done
