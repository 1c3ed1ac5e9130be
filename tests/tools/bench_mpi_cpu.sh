#!/usr/bin/env bash
# The cost of running tensor-parallel CPU ranks as MPI processes (docs/perf/mpi-cpu-*.md):
# `cypris bench throughput` on a dummy Llama (hidden 1024, 8 layers, vocab 32000, bf16 weights),
# interleaved runs of
#   1proc-2t   one process, -tp 1, --threads 2
#   mp-tp2     one process, -tp 2 (thread ranks), --threads 2 (one thread per rank)
#   mpi-np2    mpirun -np 2, -tp 2, --threads 1 per process
# printing each run's output and total tokens/s and the CPU seconds all its processes used.
# usage: tests/tools/bench_mpi_cpu.sh [path/to/cypris] [rounds (3)]
set -euo pipefail
bin="${1:-build/app/cypris}"
rounds="${2:-3}"
model="$(mktemp -d)"
trap 'rm -rf "$model"' EXIT
cat > "$model/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816,
 "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 32000,
 "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
 "tie_word_embeddings": false, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
EOF
args=(bench throughput --model "$model" --load-format dummy --num-prompts 8 --input-len 64 --output-len 32
      --max-model-len 512)
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
run() {
  local name="$1"; shift
  local out
  out="$( { /usr/bin/time -f "cpu %U %S" "$@" 2>&1 1>&3 | grep '^cpu' ; } 3>&1 )"
  local otps ttps cpu
  otps="$(grep 'output tokens/s' <<<"$out" | awk -F'|' '{gsub(/ /,"",$3); print $3}')"
  ttps="$(grep 'total tokens/s' <<<"$out" | awk -F'|' '{gsub(/ /,"",$3); print $3}')"
  cpu="$(grep '^cpu' <<<"$out" | awk '{printf "%.1f", $2 + $3}')"
  echo "$name output_tok_s=$otps total_tok_s=$ttps cpu_s=$cpu"
}
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
for r in $(seq "$rounds"); do
  run 1proc-2t "$bin" "${args[@]}" --threads 2
  run mp-tp2 "$bin" "${args[@]}" --threads 2 -tp 2
  run mpi-np2 mpirun "${root[@]}" --oversubscribe -np 2 "$bin" "${args[@]}" --threads 1 -tp 2
done
echo "# end load $(cut -d' ' -f1-3 /proc/loadavg)"
