#!/usr/bin/env bash
# One lent-GPU session in one call (see ../shared/gpu/README.md): correctness first, then the GPU-speed
# issue's benchmarks on the Llama-3-8B shape with dummy bf16 weights. Run from the project root on the GPU
# machine after packing a CUDA build here (../shared/gpu/pack.sh build-cuda):
#   tests/bench/gpu_session.sh [tests|sanitize|bench|serving|moe|profile|all] [gtest filter]
# Writes full logs under $OUT (or /tmp/gpu-out; at most 7 files) and prints a short summary last.
set -u
MODE=${1:-all}
FILTER=${2:-*}
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
. .gpu/env.sh
# The reference GGUF files the CudaGgufModel tests read (the pack holds the models and tokenizers only):
# copied into .gpu/gguf before the call when the test-data folder is not on the GPU machine.
[ -d .gpu/gguf ] && [ ! -e "$SHR/testdata/gguf" ] && ln -s "$PWD/.gpu/gguf" "$SHR/testdata/gguf"
M=tests/fixtures/configs/llama3-8b
MODEL_ARGS="--model $M --load-format dummy --dtype bfloat16"
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

note "card: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)  commit: $(cat .gpu/commit 2>/dev/null || echo '?')"

if [ "$MODE" = tests ] || [ "$MODE" = all ]; then
  timeout 300 "$B/test_gpu_cuda" --gtest_filter="$FILTER" > "$OUT/test_gpu_cuda.txt" 2>&1
  note "test_gpu_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_gpu_cuda.txt" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$OUT/test_gpu_cuda.txt" | sort -u | head -40 | tee -a "$summary"
fi

if [ "$MODE" = sanitize ] || [ "$MODE" = all ]; then
  # compute-sanitizer over every kernel-level test (whole-model, graph and engine tests are left out:
  # they run the same kernels, many times over). Same filter as the ctest `sanitizer` label.
  KFILTER='-*Fixture*:*GgufModel*:*Engine*:*Graph*:*Equivalence*:CudaModel.*:*WeightUpload*:*BackendMemory*:*DummyFill*'
  for tool in memcheck racecheck; do
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 1 "$B/test_gpu_cuda" --gtest_filter="$KFILTER" \
      > "$OUT/sanitizer_$tool.txt" 2>&1
    note "compute-sanitizer $tool rc=$? $(grep -E '^\[  (PASSED|FAILED)|ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.txt" | tr '\n' ' ')"
  done
fi

if [ "$MODE" = bench ] || [ "$MODE" = all ]; then
  # Batch-1 decode (eager) and one 1024-token prefill, through ModelRunner::execute.
  timeout 150 "$B/bench_cuda_decode" "$M" 1024 128 > "$OUT/bench_decode.txt" 2>&1
  note "bench_cuda_decode rc=$?"; grep -iE "tok|floor|bandwidth|GB/s" "$OUT/bench_decode.txt" | tail -8 | tee -a "$summary"
  # Batch-1 decode with CUDA graphs (the default), start-up log included.
  timeout 150 "$B/cypris" bench latency $MODEL_ARGS --input-len 128 --output-len 128 > "$OUT/bench_latency.txt" 2>&1
  note "bench latency rc=$?"; grep -iE "latency|tok/s|tokens/s|start-up|graphs" "$OUT/bench_latency.txt" | tail -12 | tee -a "$summary"
  # Offline throughput, 1000 x (256 in, 256 out).
  timeout 240 "$B/cypris" bench throughput $MODEL_ARGS --num-prompts 1000 --input-len 256 --output-len 256 \
    > "$OUT/bench_throughput.txt" 2>&1
  note "bench throughput rc=$?"; grep -iE "throughput|tok/s|req/s|preempt" "$OUT/bench_throughput.txt" | tail -6 | tee -a "$summary"
fi

if [ "$MODE" = serving ] || [ "$MODE" = all ]; then
  # Serving: 512 in / 128 out at 16 requests/s against `cypris --no-ui` (graphs on, the default).
  "$B/cypris" --no-ui $MODEL_ARGS --tokenizer /work/shared/testdata/tokenizers/llama3-bpe --port 2242 \
    > "$OUT/server.txt" 2>&1 &
  srv=$!
  for _ in $(seq 1 120); do grep -q "Serving the OpenAI API" "$OUT/server.txt" && break; sleep 1; done
  timeout 120 "$B/cypris" bench serving --port 2242 --num-prompts 400 --request-rate 16 --input-len 512 \
    --output-len 128 > "$OUT/bench_serving.txt" 2>&1
  note "bench serving rc=$?"; grep -iE "ttft|tpot|itl|throughput|fail" "$OUT/bench_serving.txt" | tail -12 | tee -a "$summary"
  grep -iE "start-up" "$OUT/server.txt" | tee -a "$summary"
  kill $srv; wait $srv 2>/dev/null
fi
if [ "$MODE" = moe ] || [ "$MODE" = all ]; then
  # A Qwen3-MoE-shaped layer stack against dense stacks of its active and total MLP width (batch-1
  # decode, bf16, eager): the MoE layer's time per token against the dense layer of the same active size.
  timeout 120 "$B/bench_moe_decode" 8 64 1 cuda > "$OUT/bench_moe.txt" 2>&1
  note "bench_moe_decode rc=$?"; grep -E "ms/token|layers" "$OUT/bench_moe.txt" | tee -a "$summary"
fi
if [ "$MODE" = profile ] || [ "$MODE" = all ]; then
  # Per-kernel time and DRAM bytes of decode steps (Nsight Compute; a 128-token prompt, eager).
  timeout 90 ncu --clock-control none --launch-skip 2600 --launch-count 360 \
    --metrics gpu__time_duration.sum,dram__bytes.sum --csv "$B/bench_cuda_decode" "$M" 128 12 > "$OUT/ncu.csv" 2>&1
  note "ncu rc=$?"
fi
echo "=== summary"; cat "$summary"
