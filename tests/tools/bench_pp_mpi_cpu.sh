#!/usr/bin/env bash
# Pipeline stages across MPI processes on the CPU (docs/perf/pp-mpi-cpu-*.md): `cypris bench
# throughput` on a dummy Llama (hidden 768, 8 layers, vocab 8000, fp32 weights), interleaved runs of
#   plain-2t     one process, one stage, --threads 2
#   pp2-2t       one process, -pp 2 (two stages as threads), --threads 2 (one thread per stage)
#   mpi-pp2      mpirun -np 2, -pp 2 (one stage per process), --threads 1 per process
# printing each run's throughput, the stages' utilisation (pipeline runs) and the CPU seconds all its
# processes used.
# usage: tests/tools/bench_pp_mpi_cpu.sh [path/to/cypris] [rounds (2)]
set -euo pipefail
bin="${1:-build/app/cypris}"
rounds="${2:-2}"
model="$(mktemp -d)"
trap 'rm -rf "$model"' EXIT
cat > "$model/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 768, "intermediate_size": 2048,
 "num_hidden_layers": 8, "num_attention_heads": 12, "num_key_value_heads": 4, "vocab_size": 8000,
 "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
 "tie_word_embeddings": false, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}
EOF
args=(bench throughput --model "$model" --load-format dummy --num-prompts 16 --input-len 64 --output-len 32
      --max-model-len 256)
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
run() {
  local name="$1"; shift
  local out
  out="$( { /usr/bin/time -f "cpu %U %S" "$@" 2>&1 1>&3 | grep '^cpu' ; } 3>&1 )"
  local otps cpu stages
  otps="$(grep 'output tokens/s' <<<"$out" | awk -F'|' '{gsub(/ /,"",$3); print $3}')"
  cpu="$(grep '^cpu' <<<"$out" | awk '{printf "%.1f", $2 + $3}')"
  stages="$(grep -E '^\| [0-9]+: layers' <<<"$out" | awk -F'|' '{gsub(/ /,"",$4); printf "%s ", $4}' || true)"
  echo "$name output_tok_s=$otps cpu_s=$cpu stage_utilisation=${stages:-n/a}"
}
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
for r in $(seq "$rounds"); do
  run plain-2t "$bin" "${args[@]}" --threads 2
  run pp2-2t "$bin" "${args[@]}" --threads 2 -pp 2
  run mpi-pp2 mpirun "${root[@]}" --oversubscribe -np 2 "$bin" "${args[@]}" --threads 1 -pp 2
done
echo "# end load $(cut -d' ' -f1-3 /proc/loadavg)"
