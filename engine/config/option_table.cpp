// The table of every option. Flags, defaults and choices follow Aphrodite's option reference
// (../shared/reference/aphrodite-engine-options.txt), plus the vLLM options Aphrodite users pass
// and Cypris's own. Adding an option is one entry here and one field in engine_config.h.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/config/kv_cache_dtype.h"
#include "engine/config/options.h"

namespace cypris {
namespace {

using detail::bind_field;
#define FIELD(path) [](EngineConfig& c) { return &c.path; }

// A small builder so each entry reads as one line of facts.
struct Opt {
  OptionSpec s;
  Opt(std::string name, OptionBinding b, std::string metavar, std::string help) {
    s.name = std::move(name);
    s.binding = std::move(b);
    s.metavar = std::move(metavar);
    s.help = std::move(help);
  }
  Opt& alias(std::string a) {
    s.aliases.push_back(std::move(a));
    return *this;
  }
  Opt& choices(std::vector<std::string> c) {
    s.choices = std::move(c);
    return *this;
  }
  Opt& range(std::optional<double> lo, std::optional<double> hi, bool lo_exclusive = false) {
    s.min = lo;
    s.max = hi;
    s.min_exclusive = lo_exclusive;
    return *this;
  }
  // Known choices that are refused with a reason (listed in --help, greyed out in the UI).
  Opt& refuse(std::vector<std::string> values, const std::string& why) {
    for (auto& v : values) {
      if (std::find(s.choices.begin(), s.choices.end(), v) == s.choices.end()) s.choices.push_back(v);
      s.refused.emplace_back(std::move(v), why);
    }
    return *this;
  }
  Opt& json() {
    s.json_object = true;
    return *this;
  }
  Opt& env(std::string e) {
    s.env = std::move(e);
    return *this;
  }
  Opt& no_effect(std::string why) {
    s.support = OptionSupport::NoEffect;
    s.note = std::move(why);
    return *this;
  }
  Opt& not_yet(std::string what) {
    s.support = OptionSupport::NotYet;
    s.note = std::move(what);
    return *this;
  }
};

std::vector<OptionSpec> build_table() {
  std::vector<OptionSpec> t;
  std::string group;
  auto add = [&](Opt o) {
    o.s.group = group;
    t.push_back(std::move(o.s));
  };
  const std::string kRay =
      "Cypris runs its ranks as threads of one process or as processes started by mpirun "
      "(--distributed-executor-backend); there is no Ray";
  const std::string kVision = "vision-language models";
  const std::string kSpec = "speculative decoding";
  const std::string kQuantRefused =
      "not supported yet in Cypris; supported: gptq (also gptq_marlin; marlin for Marlin-format GPTQ), awq, "
      "compressed-tensors (pack-quantized, "
      "int-quantized, float-quantized), fp8, exl2, bitsandbytes (all read from the checkpoint's quantization_config, so "
      "-q may be left out; -q fp8 on a 16-bit checkpoint quantizes it at load) and gguf (a .gguf --model or "
      "--gguf-file NAME)";

  group = "Model Options";
  add(Opt("model", bind_field(FIELD(model.model)), "MODEL",
          "Name or path of the Hugging Face model to use: a local folder, a .gguf file, or a repo id (org/name)."));
  add(Opt("gguf-file", bind_field(FIELD(model.gguf_file)), "NAME",
          "The GGUF file to load from the --model repo or folder (e.g. model-Q4_K_M.gguf); only that file (and "
          "the other parts of a split model) is downloaded.")
          .alias("--gguf_file"));
  add(Opt("tokenizer", bind_field(FIELD(model.tokenizer)), "TOKENIZER",
          "Name or path of the Hugging Face tokenizer to use. Defaults to model."));
  add(Opt("revision", bind_field(FIELD(model.revision)), "REVISION",
          "The specific model version to use. Can be a branch, tag, or commit ID. Defaults to main."));
  add(Opt("code-revision", bind_field(FIELD(model.code_revision)), "REVISION",
          "The code revision to use for models with remote code.")
          .no_effect("Cypris runs no remote model code; architectures are implemented natively"));
  add(Opt("tokenizer-revision", bind_field(FIELD(model.tokenizer_revision)), "REVISION",
          "The tokenizer revision to use."));
  add(Opt("tokenizer-mode", bind_field(FIELD(model.tokenizer_mode)), "{auto,slow}",
          "Tokenizer mode. \"auto\" uses tokenizer.json when the model has one; \"slow\" prefers the "
          "SentencePiece tokenizer.model when present.")
          .choices({"auto", "slow"})
          .refuse({"mistral"},
                  "not supported yet in Cypris: mistral_common's tekken tokenizer; auto reads the "
                  "model's tokenizer.json (Mistral repos ship one)"));
  add(Opt("trust-remote-code", bind_field(FIELD(model.trust_remote_code)), "",
          "Trust the model's remote code from Hugging Face.")
          .no_effect("Cypris runs no remote model code; architectures are implemented natively"));
  add(Opt("download-dir", bind_field(FIELD(model.download_dir)), "DIRECTORY",
          "The directory to download the model to. Defaults to the Hugging Face cache."));
  add(Opt("load-format", bind_field(FIELD(model.load_format)), "{auto,pt,safetensors,npcache,dummy,gguf,bitsandbytes}",
          "The format of the model weights. Defaults to auto: safetensors when the model has them, else PyTorch "
          "pytorch_model*.bin files (a .gguf --model is read as GGUF). \"pt\" reads PyTorch's zip+pickle files "
          "with a reader that accepts only tensor storages and refuses anything that would run code. \"dummy\" "
          "uses seeded random weights of the config's shapes (for benchmarks). \"bitsandbytes\" reads a "
          "bitsandbytes-quantized safetensors checkpoint (as auto does).")
          .choices({"auto", "pt", "safetensors", "dummy", "gguf", "bitsandbytes"})
          .refuse({"npcache"},
                  "not supported yet in Cypris: the NumPy cache of PyTorch weights; use pt, which "
                  "reads pytorch_model*.bin directly")
          .refuse({"sharded_state"},
                  "not supported yet in Cypris: per-rank sharded checkpoints; load the full "
                  "safetensors checkpoint, each rank reads its own slices")
          .refuse({"mistral"},
                  "not supported yet in Cypris: Mistral's consolidated checkpoint layout; use the "
                  "repo's Hugging Face safetensors files")
          .refuse({"tensorizer"},
                  "not supported in Cypris: CoreWeave's tensorizer format is read by a Python "
                  "library; use safetensors"));
  add(Opt("config-format", bind_field(FIELD(model.config_format)), "{auto,hf,mistral}",
          "The format of the model config: \"auto\" and \"hf\" read config.json (or a GGUF file's metadata).")
          .choices({"auto", "hf"})
          .refuse({"mistral"},
                  "not supported yet in Cypris: Mistral's params.json; use the repo's config.json "
                  "(--config-format hf)"));
  add(Opt("dtype", bind_field(FIELD(model.dtype)), "{auto,float16,bfloat16,float32}",
          "The data type to use. \"auto\" will use FP16 for FP32/FP16 models and BF16 for BF16 models.")
          .choices({"auto", "half", "float16", "bfloat16", "float", "float32"}));
  add(Opt("max-model-len", bind_field(FIELD(model.max_model_len)), "LENGTH",
          "The model context size. Defaults to the model's original. A larger value needs RoPE scaling.")
          .range(1, std::nullopt));
  add(Opt("guided-decoding-backend", bind_field(FIELD(model.guided_decoding_backend)),
          "{outlines,lm-format-enforcer,xgrammar,auto}",
          "The engine to use for guided decoding (JSON Schema / regex etc). Accepted for compatibility: every value "
          "runs Cypris's own grammar engine (engine/guided), which the log names at the first guided request.")
          .choices({"outlines", "lm-format-enforcer", "xgrammar", "auto"}));
  add(Opt("enforce-eager", bind_field(FIELD(model.enforce_eager)), "{true,false}",
          "If True, disable CUDA graphs. Defaults to False in Cypris (Aphrodite: True): on CUDA, decode batches "
          "replay CUDA graphs captured at load; the CPU backend always runs eagerly."));
  add(Opt("max-context-len-to-capture", bind_field(FIELD(model.max_context_len_to_capture)), "LENGTH",
          "Maximum context length covered by CUDA graphs (deprecated: use --max-seq-len-to-capture).")
          .range(1, std::nullopt));
  add(Opt("max-seq-len-to-capture", bind_field(FIELD(model.max_seq_len_to_capture)), "LENGTH",
          "Maximum sequence length covered by CUDA graphs; longer sequences run eagerly.")
          .range(1, std::nullopt));
  add(Opt("max-log-probs", bind_field(FIELD(model.max_log_probs)), "NUM",
          "The maximum number of logprobs to output for requests. Defaults to 10.")
          .alias("--max-logprobs")
          .range(0, std::nullopt));
  add(Opt("skip-tokenizer-init", bind_field(FIELD(model.skip_tokenizer_init)), "",
          "Skip initialization of the tokenizer; requests must then give token ids."));
  add(Opt("seed", bind_field(FIELD(model.seed)), "SEED", "Random seed for operations (dummy weights, "
          "requests without their own seed)."));
  add(Opt("disable-sliding-window", bind_field(FIELD(model.disable_sliding_window)), "",
          "Disables sliding window, capping the context to the sliding window size: every layer then attends to the "
          "whole (shorter) context, as vLLM does."));
  add(Opt("rope-scaling", bind_field(FIELD(model.rope_scaling)), "JSON",
          "RoPE scaling configuration in JSON format. For example, {\"type\":\"dynamic\",\"factor\":2.0}")
          .json());
  add(Opt("rope-theta", bind_field(FIELD(model.rope_theta)), "THETA",
          "RoPE theta. Use with --rope-scaling.")
          .range(0, std::nullopt, true));
  add(Opt("ignore-patterns", bind_field(FIELD(model.ignore_patterns)), "PATTERN [PATTERN ...]",
          "File patterns (globs, '*' crosses '/') to ignore when downloading and loading the model, e.g. "
          "'original/*' or '*.pt'."));
  add(Opt("max-parallel-loading-workers", bind_field(FIELD(model.max_parallel_loading_workers)), "NUM",
          "Load the model in several batches to avoid running out of RAM with tensor parallelism.")
          .range(1, std::nullopt)
          .no_effect("Cypris maps safetensors files and each rank reads only its own slices"));
  add(Opt("model-loader-extra-config", bind_field(FIELD(model.model_loader_extra_config)), "JSON",
          "Extra config for the model loader (JSON).")
          .json()
          .no_effect("Cypris's loaders take no extra configuration"));

  group = "Parallel Options";
  add(Opt("worker-use-ray", bind_field(FIELD(parallel.worker_use_ray)), "",
          "Use Ray for distributed serving.")
          .no_effect(kRay));
  add(Opt("engine-use-ray", bind_field(FIELD(parallel.engine_use_ray)), "",
          "Use Ray to start the engine in a separate process.")
          .no_effect(kRay));
  add(Opt("distributed-executor-backend", bind_field(FIELD(parallel.distributed_executor_backend)), "{mp,mpi}",
          "How the tensor-parallel ranks and pipeline stages run: mp = threads of this process; mpi = one process "
          "per rank (tensor-parallel x pipeline-parallel size of them), started by mpirun (several machines too; "
          "docs/distributed.md). Unset: mpi when started by mpirun, else mp.")
          .choices({"mp", "mpi"})
          .refuse({"ray"}, "not supported in Cypris, which has no Ray; use mp (threads in one process) or mpi (one "
                           "process per rank, started by mpirun)"));
  add(Opt("tensor-parallel-size", bind_field(FIELD(parallel.tensor_parallel_size)), "SIZE",
          "The number of GPUs (or CPU ranks on the CPU device) to split the model over (tensor parallelism).")
          .alias("-tp")
          .range(1, 256));
  add(Opt("pipeline-parallel-size", bind_field(FIELD(parallel.pipeline_parallel_size)), "SIZE",
          "The number of pipeline stages to use for loading the model: stage s holds layers [s L/P, (s+1) L/P) "
          "and their KV cache, on its own --tensor-parallel-size ranks (in this process: CPU ranks, or one GPU "
          "per rank; under mpirun: one process per rank); a step's sequences go through the stages in "
          "micro-batches, so the stages work at once.")
          .alias("-pp")
          .range(1, 1024));
  add(Opt("ray-workers-use-nsight", bind_field(FIELD(parallel.ray_workers_use_nsight)), "",
          "Use nsight for profiling Ray workers.")
          .no_effect(kRay + "; run nsys on the cypris process"));
  add(Opt("disable-custom-all-reduce", bind_field(FIELD(parallel.disable_custom_all_reduce)), "",
          "Disables the custom all-reduce kernels.")
          .no_effect("Cypris has no custom all-reduce kernels: tensor-parallel GPUs always use NCCL's all-reduce, CPU "
                     "ranks an in-process one"));

  group = "Quantization Options";
  add(Opt("kv-cache-dtype", bind_field(FIELD(quant.kv_cache_dtype)),
          fmt::format("{{{}}}", fmt::join(kv_cache_dtype_names(), ",")),
          "The data type for KV cache. \"auto\" uses the model dtype (bfloat16 or float16) on a GPU and "
          "float16 on the CPU (as llama.cpp: half the bytes per token of float32, logits within about 0.1% of a "
          "float32 cache's); \"float16\", \"bfloat16\" and \"float32\" choose one on any device (16 bits: "
          "twice the blocks of float32); \"fp8\" (= fp8_e4m3) and \"fp8_e5m2\" store it in 8 bits, "
          "twice the blocks of a 16-bit cache in the same memory, with per-layer scales from the checkpoint or "
          "--quantization-param-path.")
          .choices(kv_cache_dtype_names()));
  add(Opt("quantization", bind_field(FIELD(quant.quantization)), "METHOD",
          "The method used to quantize the weights. Inferred from the model when possible (the checkpoint's "
          "quantization_config); when given it must agree with the checkpoint. Cypris supports gptq (2/3/4/8 bits; "
          "gptq_marlin loads the same checkpoints; marlin: GPTQ checkpoints in Marlin's format), awq (4-bit GEMM), compressed-tensors (pack-quantized W4A16/W8A16, "
          "int-quantized W8A8, float-quantized FP8), fp8 (FP8 checkpoints; on a 16-bit checkpoint: quantized at load "
          "to FP8 with one scale per output channel), exl2 (exllamav2's mixed 2-8 bit checkpoints, dequantized at "
          "load to --dtype), bitsandbytes (= bnb: pre-quantized NF4/FP4 checkpoints, nested absmax included, and "
          "int8 ones, kept in 8 bits) and gguf (llama.cpp's quantization types, read from a .gguf --model); "
          "the others are not supported yet. See docs/quantization.md.")
          .alias("-q")
          .choices({"gguf", "gptq", "gptq_marlin", "marlin", "awq", "compressed-tensors", "fp8", "exl2", "bitsandbytes",
                    "bnb"})
          .refuse({"aqlm",
                   "eetq",
                   "quip",
                   "squeezellm",
                   "deepspeedfp",
                   "gptq_marlin_24",
                   "tpu_int8",
                   "fbgemm_fp8",
                   "modelopt",
                   "awq_marlin",
                   "qqq",
                   "experts_int8",
                   "neuron_quant"},
                  kQuantRefused));
  add(Opt("load-in-4bit", bind_field(FIELD(quant.load_in_4bit)), "",
          "Load the 32/16bit model in 4bit: its linear layers quantized at load to 4 bits with a scale and zero "
          "point per 128 (or 32) input columns (Cypris's W4 blocks, not SmoothQuant+)."));
  add(Opt("load-in-smooth", bind_field(FIELD(quant.load_in_smooth)), "",
          "Load the 32/16bit model in 8bit, using SmoothQuant+.")
          .not_yet("quantized weights"));
  add(Opt("load-in-8bit", bind_field(FIELD(quant.load_in_8bit)), "",
          "Load the 32/16bit model in 8bit: its linear layers quantized at load to int8 with one scale per output "
          "channel (Cypris's W8 blocks, not BitsAndBytes' LLM.int8())."));
  add(Opt("quantization-param-path", bind_field(FIELD(quant.quantization_param_path)), "PATH",
          "Path to the JSON file containing the KV cache scaling factors for FP8 (vLLM's format). Used when the "
          "checkpoint has no k_scale/v_scale tensors; without either, the scales are 1.0."));

  group = "KV Cache Options";
  add(Opt("block-size", bind_field(FIELD(cache.block_size)), "{8,16,32}",
          "The token block size. Defaults to 16.")
          .choices({"8", "16", "32"}));
  add(Opt("context-shift", bind_field(FIELD(cache.context_shift)), "",
          "Enable context shifting: a sequence that reaches the context length drops its oldest tokens after a kept "
          "prefix (a chat's system prompt, else the prompt up to a quarter of the context) and goes on generating "
          "until max_tokens, instead of stopping with finish_reason length; prompt + max_tokens may then exceed "
          "--max-model-len. The kept prefix's KV cache is reused; the cached keys of the moved tokens are rotated "
          "to their new positions (see --context-shift-mode). In the rotate mode a new prompt that repeats a later "
          "stretch of a recently finished sequence after their common start (a chat that drops its oldest "
          "messages) takes that sequence's KV, keys rotated, and computes only the rest. Not with banned_strings "
          "or beam search."));
  add(Opt("context-shift-mode", bind_field(FIELD(cache.context_shift_mode)), "{rotate,recompute}",
          "With --context-shift: rotate (default) keeps the cached K/V of the tokens that move and rotates their "
          "keys to the new positions, as KoboldCpp and llama.cpp do (fast; the moved tokens keep what they saw "
          "of the dropped ones, so the output is close to, not equal to, a fresh run on the shifted window); "
          "recompute computes them again (a prefill of about three quarters of the window, the output of a "
          "fresh run). Families whose rotary is not a plain position rotation (dynamic NTK, longrope, sliding "
          "windows) always recompute.")
          .choices({"rotate", "recompute"}));
  add(Opt("num-gpu-blocks-override", bind_field(FIELD(cache.num_gpu_blocks_override)), "NUM",
          "If specified, ignore the profiling result and use this number of GPU (or CPU-device) blocks.")
          .range(1, std::nullopt));
  add(Opt("swap-space", bind_field(FIELD(cache.swap_space)), "SIZE",
          "The amount of CPU swap space to use, in GiBs.")
          .range(0, std::nullopt));
  add(Opt("gpu-memory-utilization", bind_field(FIELD(cache.gpu_memory_utilization)), "FRACTION",
          "The fraction of VRAM to use per GPU. Set to 0.9 (90%) by default.")
          .alias("-gmu")
          .range(0, 1, true));
  add(Opt("enable-prefix-caching", bind_field(FIELD(cache.enable_prefix_caching)), "",
          "Enables automatic prefix caching: requests sharing a prefix reuse its KV cache blocks, so a chat that "
          "re-sends the conversation computes only the new tokens. On by default (vLLM V1; Aphrodite: off); the "
          "outputs are the same either way."));
  add(Opt("cpu-offload-gb", bind_field(FIELD(cache.cpu_offload_gb)), "GIB",
          "Space in GiB per GPU to offload weights to the CPU: whole decoder layers, from the GPU's last layer "
          "backwards until GIB are covered, keep their weights in pinned host memory and are copied to the GPU each "
          "time they run (a virtual way to give the card GIB more memory, paid in PCIe traffic every step). With "
          "--gpu-layers it applies to the GPU's layers; no effect with --device cpu.")
          .range(0, std::nullopt));
  add(Opt("cpu-kvcache-space", bind_field(FIELD(cache.cpu_kvcache_space)), "GIB",
          "KV cache size in GiB when the engine runs on the CPU device.")
          .range(0, std::nullopt, true));

  group = "Tokenizer Options";
  add(Opt("tokenizer-pool-size", bind_field(FIELD(tokenizer_pool.tokenizer_pool_size)), "SIZE",
          "Size of tokenizer pool to use for async tokenization. If 0, will use synchronous tokenization.")
          .range(0, std::nullopt)
          .no_effect("Cypris tokenizes on the HTTP threads, which already run in parallel"));
  add(Opt("tokenizer-pool-type", bind_field(FIELD(tokenizer_pool.tokenizer_pool_type)), "{ray}",
          "The type of tokenizer pool to use for async tokenization.")
          .choices({"ray"})
          .no_effect(kRay));
  add(Opt("tokenizer-pool-extra-config", bind_field(FIELD(tokenizer_pool.tokenizer_pool_extra_config)), "CONFIG",
          "Extra config for the tokenizer pool (JSON).")
          .json()
          .no_effect(kRay));

  group = "Scheduler Options";
  add(Opt("max-num-batched-tokens", bind_field(FIELD(scheduler.max_num_batched_tokens)), "NUM",
          "The maximum number of tokens to be processed in a single iteration.")
          .range(1, std::nullopt));
  add(Opt("max-num-seqs", bind_field(FIELD(scheduler.max_num_seqs)), "NUM",
          "The maximum number of sequences to be processed in a single iteration. Defaults to 256.")
          .range(1, std::nullopt));
  add(Opt("scheduler-delay-factor", bind_field(FIELD(scheduler.scheduler_delay_factor)), "FACTOR",
          "Apply a delay (of delay factor multiplied by previous prompt latency) before scheduling the next "
          "prompt.")
          .alias("--delay-factor")
          .range(0, std::nullopt));
  add(Opt("scheduling-policy", bind_field(FIELD(scheduler.scheduling_policy)), "{fcfs,priority}",
          "The scheduling policy: first come first served, or by each request's priority (lower first).")
          .alias("--policy")
          .choices({"fcfs", "priority"}));
  add(Opt("enable-chunked-prefill", bind_field(FIELD(scheduler.enable_chunked_prefill)), "",
          "If True, prefill requests can be chunked based on the remaining max_num_batched_tokens, so running "
          "requests keep decoding while a long prompt is read. On by default (vLLM V1; Aphrodite: off), with a "
          "budget of max(2048, --max-num-seqs) tokens per step; the outputs are the same either way."));
  add(Opt("use-v2-block-manager", bind_field(FIELD(cache.use_v2_block_manager)), "",
          "Whether to use the BlockSpaceManagerV2 or not.")
          .no_effect("Cypris has one block manager"));
  add(Opt("preemption-mode", bind_field(FIELD(scheduler.preemption_mode)), "{recompute,swap}",
          "How to preempt when KV blocks run out: recompute the request later, or swap its blocks to the "
          "CPU. Default: recompute.")
          .alias("--preemption_mode")
          .choices({"recompute", "swap"}));
  add(Opt("num-scheduler-steps", bind_field(FIELD(scheduler.num_scheduler_steps)), "NUM",
          "Maximum number of forward steps per scheduler call.")
          .range(1, std::nullopt)
          .not_yet("multi-step scheduling"));
  add(Opt("multi-step-stream-outputs", bind_field(FIELD(scheduler.multi_step_stream_outputs)), "{true,false}",
          "With multi-step scheduling, stream outputs at the end of all steps (false) or after each step (true).")
          .no_effect("Cypris runs one step per scheduler call and streams after every step"));
  add(Opt("disable-async-output-proc", bind_field(FIELD(scheduler.disable_async_output_proc)), "",
          "Disable async output processing.")
          .no_effect("Cypris detokenizes and emits outputs on the engine thread after each step; there is no "
                     "asynchronous output processor to turn off"));

  group = "Device Options";
  add(Opt("device", bind_field(FIELD(device.device)), "{auto,cuda,neuron,cpu}",
          "The device to use for the engine. \"auto\" picks CUDA when a GPU exists, else the CPU.")
          .choices({"auto", "cuda", "neuron", "cpu", "tpu"})
          .refuse({"openvino", "xpu"},
                  "not supported in Cypris: it runs on NVIDIA GPUs through CUDA or on the CPU "
                  "(--device cuda, cpu or auto)"));
  add(Opt("threads", bind_field(FIELD(device.threads)), "NUM",
          "Worker threads of the CPU backend. Defaults to the number of cores.")
          .range(1, 1024));
  add(Opt("gpu-layers", bind_field(FIELD(device.gpu_layers)), "N",
          "Put the first N decoder layers and their KV cache on the GPU and the rest, with the LM head, on the CPU: "
          "two pipeline stages in one process (KoboldCpp's --gpulayers, llama.cpp's -ngl). -1 or \"auto\": as "
          "many as fit in --gpu-memory-utilization beside a KV cache of --max-model-len tokens (0 without a GPU). "
          "Unset: the whole model on --device.")
          .alias("--gpulayers")
          .alias("-ngl")
          .range(-1, std::nullopt));
  add(Opt("override-neuron-config", bind_field(FIELD(parallel.override_neuron_config)), "JSON",
          "Overrides for the AWS Neuron device configuration (JSON).")
          .json()
          .no_effect("Cypris has no AWS Neuron backend"));

  group = "Speculative Decoding Options";
  add(Opt("speculative-model", bind_field(FIELD(spec.speculative_model)), "{MODEL,\"[ngram]\"}",
          "The name or path of the draft model, or \"[ngram]\" for ngram prompt lookup decoding. "
          "A draft model must share the target's vocabulary; Medusa, EAGLE and MLP speculators are refused."));
  add(Opt("num-speculative-tokens", bind_field(FIELD(spec.num_speculative_tokens)), "NUM",
          "The number of speculative tokens to sample from the draft model.")
          .range(1, 64));
  add(Opt("num-lookahead-slots", bind_field(FIELD(scheduler.num_lookahead_slots)), "NUM",
          "The number of KV slots a decode that verifies drafts reserves after its last token "
          "(speculative decoding: at least --num-speculative-tokens; 0 or unset means that many).")
          .range(0, std::nullopt));
  add(Opt("speculative-max-model-len", bind_field(FIELD(spec.speculative_max_model_len)), "LEN",
          "The maximum sequence length supported by the draft model.")
          .range(1, std::nullopt));
  add(Opt("speculative-disable-by-batch-size", bind_field(FIELD(spec.speculative_disable_by_batch_size)), "NUM",
          "Disable speculative decoding in a step when more than this many requests are running.")
          .range(1, std::nullopt));
  add(Opt("ngram-prompt-lookup-max", bind_field(FIELD(spec.ngram_prompt_lookup_max)), "NUM",
          "Max size of window for ngram prompt lookup.")
          .range(1, 1024));
  add(Opt("ngram-prompt-lookup-min", bind_field(FIELD(spec.ngram_prompt_lookup_min)), "NUM",
          "Min size of window for ngram prompt lookup.")
          .range(1, 1024));
  add(Opt("speculative-model-quantization", bind_field(FIELD(spec.speculative_model_quantization)), "METHOD",
          "The method used to quantize the weights of the draft model.")
          .choices({"aqlm", "awq", "deepspeedfp", "tpu_int8", "fp8", "fbgemm_fp8", "modelopt", "marlin", "gguf",
                    "gptq_marlin_24", "gptq_marlin", "awq_marlin", "gptq", "compressed-tensors", "bitsandbytes", "qqq",
                    "experts_int8", "neuron_quant"}));
  add(Opt("speculative-draft-tensor-parallel-size", bind_field(FIELD(spec.speculative_draft_tensor_parallel_size)),
          "SIZE", "Number of tensor parallel replicas for the draft model.")
          .alias("-spec-draft-tp")
          .range(1, std::nullopt));
  add(Opt("speculative-disable-mqa-scorer", bind_field(FIELD(spec.speculative_disable_mqa_scorer)), "",
          "Disable the MQA scorer in speculative decoding and fall back to batch expansion.")
          .not_yet(kSpec));
  add(Opt("spec-decoding-acceptance-method", bind_field(FIELD(spec.spec_decoding_acceptance_method)),
          "{rejection_sampler,typical_acceptance_sampler}",
          "How draft tokens are accepted during speculative decoding.")
          .choices({"rejection_sampler", "typical_acceptance_sampler"}));
  add(Opt("typical-acceptance-sampler-posterior-threshold",
          bind_field(FIELD(spec.typical_acceptance_sampler_posterior_threshold)), "THRESHOLD",
          "Lower bound of the posterior probability of a token to be accepted (typical acceptance sampler).")
          .range(0, std::nullopt));
  add(Opt("typical-acceptance-sampler-posterior-alpha",
          bind_field(FIELD(spec.typical_acceptance_sampler_posterior_alpha)), "ALPHA",
          "Scaling factor of the entropy-based acceptance threshold (typical acceptance sampler).")
          .range(0, std::nullopt));
  add(Opt("disable-logprobs-during-spec-decoding", bind_field(FIELD(spec.disable_logprobs_during_spec_decoding)),
          "{true,false}", "Do not compute token log probabilities during speculative decoding.")
          .not_yet(kSpec));

  group = "LoRA Options";
  add(Opt("enable-lora", bind_field(FIELD(lora.enable_lora)), "",
          "Enable loading LoRA adapter weights (PEFT folders: --lora-modules, /v1/lora/load); a request picks "
          "one by its model name."));
  add(Opt("max-loras", bind_field(FIELD(lora.max_loras)), "NUM",
          "The maximum number of LoRAs on the device at once (adapter slots), so in a single batch; requests for "
          "other loaded adapters wait until a slot no running request uses can take theirs.")
          .range(1, 256));
  add(Opt("max-lora-rank", bind_field(FIELD(lora.max_lora_rank)), "{8,16,32,64,128,256}",
          "The maximum LoRA rank. Defaults to 16.")
          .choices({"8", "16", "32", "64", "128", "256"}));
  add(Opt("lora-extra-vocab-size", bind_field(FIELD(lora.lora_extra_vocab_size)), "NUM",
          "Maximum size of extra vocabulary that can be present in a LoRA adapter.")
          .range(0, std::nullopt)
          .no_effect("Cypris adapters add no tokens (adapters with new embeddings, modules_to_save, are refused)"));
  add(Opt("lora-dtype", bind_field(FIELD(lora.lora_dtype)), "{auto,float16,bfloat16,float32}",
          "Data type for LoRA. If auto, defaults to base model dtype.")
          .choices({"auto", "float16", "bfloat16", "float32"})
          .no_effect("adapters are kept in the activation dtype: float32 on the CPU, the model dtype on a GPU"));
  add(Opt("max-cpu-loras", bind_field(FIELD(lora.max_cpu_loras)), "NUM",
          "Maximum number of LoRAs to store in CPU memory (least recently used dropped first, read again from "
          "their path when a request names them; adapters of waiting or running requests are kept). Must be >= "
          "--max-loras; defaults to --max-loras.")
          .range(1, std::nullopt));
  add(Opt("fully-sharded-loras", bind_field(FIELD(lora.fully_sharded_loras)), "",
          "Use fully sharded LoRA layers with tensor parallelism.")
          .no_effect("with tensor parallelism A is always split for row-parallel and B for column-parallel layers; "
                     "the shrink of column-parallel layers is computed whole on each rank"));
  add(Opt("long-lora-scaling-factors", bind_field(FIELD(lora.long_lora_scaling_factors)), "FACTOR [FACTOR ...]",
          "Scaling factors for Long LoRA adapters.")
          .not_yet("Long LoRA scaling"));
  add(Opt("qlora-adapter-name-or-path", bind_field(FIELD(lora.qlora_adapter_name_or_path)), "PATH",
          "Name or path of the QLoRA adapter (a PEFT folder or Hugging Face repo org/name[@revision]); needs "
          "--enable-lora. Loaded at start like --lora-modules, named after its folder or repo."));
  add(Opt("enable-prompt-adapter", bind_field(FIELD(lora.enable_prompt_adapter)), "",
          "Enable handling of prompt adapters (soft prompts).")
          .not_yet("prompt adapters"));
  add(Opt("max-prompt-adapters", bind_field(FIELD(lora.max_prompt_adapters)), "NUM",
          "Max number of prompt adapters in a batch.")
          .range(1, std::nullopt)
          .not_yet("prompt adapters"));
  add(Opt("max-prompt-adapter-token", bind_field(FIELD(lora.max_prompt_adapter_token)), "NUM",
          "Max number of prompt adapter tokens.")
          .range(0, std::nullopt)
          .not_yet("prompt adapters"));

  group = "API Options";
  add(Opt("host", bind_field(FIELD(server.host)), "HOST", "The host name. Defaults to localhost."));
  add(Opt("port", bind_field(FIELD(server.port)), "PORT", "The port number. Defaults to 2242.").range(0, 65535));
  add(Opt("allowed-credentials", bind_field(FIELD(server.allow_credentials)), "{true,false}",
          "Allow credentials in CORS requests.")
          .alias("--allow-credentials"));
  add(Opt("allowed-origins", bind_field(FIELD(server.allowed_origins)), "ALLOWED_ORIGINS",
          "The allowed CORS origins (a JSON list or several values)."));
  add(Opt("allowed-methods", bind_field(FIELD(server.allowed_methods)), "ALLOWED_METHODS",
          "The allowed CORS methods (a JSON list or several values)."));
  add(Opt("allowed-headers", bind_field(FIELD(server.allowed_headers)), "ALLOWED_HEADERS",
          "The allowed CORS headers (a JSON list or several values)."));
  add(Opt("api-keys", bind_field(FIELD(server.api_keys)), "API_KEY [API_KEY ...]",
          "API key(s) that clients must send (Authorization: Bearer KEY or x-api-key).")
          .env("APHRODITE_API_KEY"));
  add(Opt("admin-key", bind_field(FIELD(server.admin_key)), "ADMIN_KEY",
          "The admin API key, for admin operations (model load/unload).")
          .env("APHRODITE_ADMIN_KEY"));
  add(Opt("launch-kobold-api", bind_field(FIELD(server.launch_kobold_api)), "",
          "Launch the Kobold API server in addition to the OpenAI one."));
  add(Opt("kobold-no-auth", bind_field(FIELD(server.kobold_no_auth)), "",
          "Leave the Kobold routes open when --api-keys is set (Kobold clients such as SillyTavern's "
          "KoboldAI mode send no key)."));
  add(Opt("max-length", bind_field(FIELD(server.max_length)), "LENGTH",
          "The maximum output length: the max_length of Kobold requests that send none (Aphrodite uses it for "
          "Horde).")
          .range(1, std::nullopt));
  add(Opt("served-model-name", bind_field(FIELD(model.served_model_name)), "NAME [NAME ...]",
          "The model name(s) used in the API. The first is used in responses; requests may name any. "
          "Defaults to --model."));
  add(Opt("lora-modules", bind_field(FIELD(server.lora_modules)), "LORA_MODULES [LORA_MODULES ...]",
          "LoRA modules to load at start, as name=path (needs --enable-lora); requests name them as their model."));
  add(Opt("chat-template", bind_field(FIELD(server.chat_template)), "PATH",
          "The file path to the chat template. By default, the model's own template is used."));
  add(Opt("response-role", bind_field(FIELD(server.response_role)), "ROLE",
          "The role name to return if add_generation_prompt=True."));
  add(Opt("enable-auto-tool-choice", bind_field(FIELD(server.enable_auto_tool_choice)), "",
          "Let chat requests use tool_choice \"auto\" (the default when they send tools): the model's output is "
          "parsed for tool calls by --tool-call-parser. Without it, an explicit \"auto\" is refused with 400 and "
          "requests that only send tools get plain text back."));
  add(Opt("tool-call-parser", bind_field(FIELD(server.tool_call_parser)), "{hermes,llama3_json,mistral}",
          "How tool calls are read from the output with --enable-auto-tool-choice: hermes (Hermes, Qwen2.5, "
          "Qwen3: <tool_call>{...}</tool_call>), llama3_json (Llama 3.1+: a JSON object, after <|python_tag|> or "
          "not), mistral ([TOOL_CALLS][...]). Unset: chosen from the chat template's text (logged).")
          .choices({"hermes", "llama3_json", "mistral"}));
  add(Opt("ssl-keyfile", bind_field(FIELD(server.ssl_keyfile)), "PATH", "The file path to the SSL key file."));
  add(Opt("ssl-certfile", bind_field(FIELD(server.ssl_certfile)), "PATH", "The file path to the SSL cert file."));
  add(Opt("root-path", bind_field(FIELD(server.root_path)), "PATH",
          "URL prefix when the server runs behind a path-based routing proxy."));
  add(Opt("middleware", bind_field(FIELD(server.middleware)), "MIDDLEWARE",
          "Additional ASGI middleware to apply to the app.")
          .no_effect("Cypris's server is native C++ and loads no Python middleware"));
  add(Opt("max-request-body-mb", bind_field(FIELD(server.max_request_body_mb)), "MIB",
          "Request bodies larger than this many MiB are refused with 413.")
          .range(1, 4096));
  add(Opt("max-connections", bind_field(FIELD(server.max_connections)), "NUM",
          "Connections the server holds at once; more are answered 503 at once. 0: max(64, "
          "--max-num-seqs + 32).")
          .range(0, 1000000));
  add(Opt("max-connections-per-client", bind_field(FIELD(server.max_connections_per_client)), "NUM",
          "Of those, connections from one client address. 0: three quarters of --max-connections.")
          .range(0, 1000000));
  add(Opt("request-head-timeout", bind_field(FIELD(server.request_head_timeout)), "SECONDS",
          "Seconds a client has to send a request's whole head (request line and headers); slower "
          "clients get 408 and are disconnected.")
          .range(0.1, 3600));
  add(Opt("max-tokenize-tokens", bind_field(FIELD(server.max_tokenize_tokens)), "NUM",
          "The most tokens /v1/tokenize, /v1/token/encode and /api/extra/tokencount return for one "
          "request; longer texts are refused with 400. 0: 4 times the model's context length.")
          .range(0, std::nullopt));
  add(Opt("max-prompts-per-request", bind_field(FIELD(server.max_prompts_per_request)), "NUM",
          "The most prompts one /v1/completions request may send as a list; longer lists are refused with "
          "400. Each prompt is a request of its own to the engine.")
          .range(1, 1000000));
  add(Opt("max-request-tokens", bind_field(FIELD(server.max_request_tokens)), "NUM",
          "The most prompt tokens one request may send, over all its prompts; more are refused with 400 "
          "(texts longer than 16 bytes per token before they are tokenized). 0: 16 times the model's "
          "context length.")
          .range(0, std::nullopt));

  group = "Vision Language Options";
  add(Opt("image-input-type", bind_field(FIELD(vision.image_input_type)), "{pixel_values,image_features}",
          "The image input type passed to the engine.")
          .choices({"pixel_values", "image_features"})
          .not_yet("vision-language models"));
  add(Opt("image-token-id", bind_field(FIELD(vision.image_token_id)), "ID", "Input ID for the image token.")
          .not_yet("vision-language models"));
  add(Opt("image-input-shape", bind_field(FIELD(vision.image_input_shape)), "SHAPE",
          "The biggest image input shape given an input type.")
          .not_yet("vision-language models"));
  add(Opt("image-feature-size", bind_field(FIELD(vision.image_feature_size)), "SIZE",
          "The image feature size along the context dimension.")
          .not_yet(kVision));
  add(Opt("image-processor", bind_field(FIELD(vision.image_processor)), "NAME",
          "Name or path of the Hugging Face image processor to use.")
          .not_yet(kVision));
  add(Opt("image-processor-revision", bind_field(FIELD(vision.image_processor_revision)), "REVISION",
          "Revision of the Hugging Face image processor.")
          .not_yet(kVision));
  add(Opt("disable-image-processor", bind_field(FIELD(vision.disable_image_processor)), "",
          "Disables the use of the image processor.")
          .not_yet(kVision));
  add(Opt("limit-mm-per-prompt", bind_field(FIELD(vision.limit_mm_per_prompt)), "LIMITS",
          "The most multimodal inputs of each kind per prompt, e.g. image=16,video=2.")
          .not_yet(kVision));
  add(Opt("mm-processor-kwargs", bind_field(FIELD(vision.mm_processor_kwargs)), "JSON",
          "Overrides for the multimodal input processor (JSON).")
          .json()
          .not_yet(kVision));

  group = "Logging Options";
  add(Opt("log-level", bind_field(FIELD(logging.log_level)), "LEVEL", "Log level.")
          .choices({"trace", "debug", "info", "warning", "error", "critical", "off"}));
  add(Opt("disable-log-stats", bind_field(FIELD(logging.disable_log_stats)), "", "Disable logging statistics."));
  add(Opt("disable-log-requests", bind_field(FIELD(logging.disable_log_requests)), "", "Disable logging requests."));
  add(Opt("max-log-len", bind_field(FIELD(logging.max_log_len)), "MAX_LOG_LEN",
          "Max number of prompt characters or prompt ID numbers printed in the log (0: none).")
          .range(0, std::nullopt));
  add(Opt("log-stats-interval", bind_field(FIELD(logging.log_stats_interval)), "SECONDS",
          "Seconds between two statistics lines in the log.")
          .range(0.1, std::nullopt));
  add(Opt("otlp-traces-endpoint", bind_field(FIELD(logging.otlp_traces_endpoint)), "URL",
          "Target URL to which OpenTelemetry traces will be sent.")
          .not_yet("OpenTelemetry tracing (use /metrics and the log's request lines)"));
  add(Opt("collect-detailed-traces", bind_field(FIELD(logging.collect_detailed_traces)), "{model,worker,all}",
          "Collect detailed traces for these modules (with --otlp-traces-endpoint).")
          .not_yet("OpenTelemetry tracing (use /metrics and the log's request lines)"));

  group = "Cypris Options";
  add(Opt("no-ui", bind_field(FIELD(app.no_ui)), "",
          "Run headless: load the model and serve the APIs on --host/--port, without the desktop window."));
  add(Opt("config", bind_field(FIELD(app.config)), "FILE",
          "Read options from a YAML or JSON file (keys are option names; command-line flags win)."));
  return t;
}

}  // namespace

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> table = build_table();
  return table;
}

const std::vector<std::string>& option_groups() {
  static const std::vector<std::string> groups = [] {
    std::vector<std::string> g;
    for (const auto& s : option_table()) {
      if (g.empty() || g.back() != s.group) g.push_back(s.group);
    }
    return g;
  }();
  return groups;
}

}  // namespace cypris
