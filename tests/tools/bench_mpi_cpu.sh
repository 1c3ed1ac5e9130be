#!/usr/bin/env bash
# Ranks as MPI processes on the CPU against the same ranks as threads of one process:
# `cypris bench throughput` on a dummy Llama, interleaved runs of
#   tensor parallelism (default; docs/perf/mpi-cpu-*.md): hidden 1024, 8 layers, vocab 32000, bf16
#     1proc-2t     one process, -tp 1, --threads 2
#     mp-tp2       one process, -tp 2 (thread ranks), --threads 2 (one thread per rank)
#     mpi-np2      mpirun -np 2, -tp 2, --threads 1 per process
#   pipeline stages (--pp; docs/perf/pp-mpi-cpu-*.md): hidden 768, 8 layers, vocab 8000, fp32
#     plain-2t     one process, one stage, --threads 2
#     pp2-2t       one process, -pp 2 (two stages as threads), --threads 2 (one thread per stage)
#     mpi-pp2      mpirun -np 2, -pp 2 (one stage per process), --threads 1 per process
# printing each run's output and total tokens/s, the stages' utilisation (pipeline runs) and the CPU
# seconds all its processes used.
# usage: tests/tools/bench_mpi_cpu.sh [--pp] [path/to/cypris] [rounds (3; --pp: 2)]
set -euo pipefail
mode=tp
if [ "${1:-}" = --pp ]; then mode=pp; shift; fi
bin="${1:-build/app/cypris}"
model="$(mktemp -d)"
trap 'rm -rf "$model"' EXIT
if [ "$mode" = tp ]; then
  rounds="${2:-3}"
  hidden=1024 inter=2816 heads=16 kv=8 vocab=32000 ctx=2048 dtype=bfloat16 prompts=8 maxlen=512
  runs=("1proc-2t|--threads 2" "mp-tp2|--threads 2 -tp 2" "mpi-np2|mpi --threads 1 -tp 2")
else
  rounds="${2:-2}"
  hidden=768 inter=2048 heads=12 kv=4 vocab=8000 ctx=1024 dtype=float32 prompts=16 maxlen=256
  runs=("plain-2t|--threads 2" "pp2-2t|--threads 2 -pp 2" "mpi-pp2|mpi --threads 1 -pp 2")
fi
cat > "$model/config.json" <<EOF
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": $hidden, "intermediate_size": $inter,
 "num_hidden_layers": 8, "num_attention_heads": $heads, "num_key_value_heads": $kv, "vocab_size": $vocab,
 "max_position_embeddings": $ctx, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
 "tie_word_embeddings": false, "torch_dtype": "$dtype", "bos_token_id": 1, "eos_token_id": 2}
EOF
args=(bench throughput --model "$model" --load-format dummy --num-prompts "$prompts" --input-len 64 --output-len 32
      --max-model-len "$maxlen")
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
run() {
  local name="$1"; shift
  local out
  out="$( { /usr/bin/time -f "cpu %U %S" "$@" 2>&1 1>&3 | grep '^cpu' ; } 3>&1 )"
  local otps ttps cpu stages
  otps="$(grep 'output tokens/s' <<<"$out" | awk -F'|' '{gsub(/ /,"",$3); print $3}')"
  ttps="$(grep 'total tokens/s' <<<"$out" | awk -F'|' '{gsub(/ /,"",$3); print $3}')"
  cpu="$(grep '^cpu' <<<"$out" | awk '{printf "%.1f", $2 + $3}')"
  stages="$(grep -E '^\| [0-9]+: layers' <<<"$out" | awk -F'|' '{gsub(/ /,"",$4); printf "%s ", $4}' || true)"
  echo "$name output_tok_s=$otps total_tok_s=$ttps cpu_s=$cpu${stages:+ stage_utilisation=$stages}"
}
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
for r in $(seq "$rounds"); do
  for spec in "${runs[@]}"; do
    name="${spec%%|*}"; flags="${spec#*|}"
    if [ "${flags%% *}" = mpi ]; then
      # shellcheck disable=SC2086
      run "$name" mpirun "${root[@]}" --oversubscribe -np 2 "$bin" "${args[@]}" ${flags#mpi }
    else
      # shellcheck disable=SC2086
      run "$name" "$bin" "${args[@]}" $flags
    fi
  done
done
echo "# end load $(cut -d' ' -f1-3 /proc/loadavg)"
