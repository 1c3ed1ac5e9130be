// EngineConfig: every engine and server option as typed fields, grouped like Aphrodite's option
// reference. The option table (options.h) is the one description of these fields: the CLI,
// --help, validation, JSON save/load and the UI options panel are all generated from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cypris {

struct ModelOptions {
  std::string model;
  std::optional<std::string> gguf_file;  // one .gguf file of the --model repo or folder
  std::optional<std::string> tokenizer;
  std::optional<std::string> revision;
  std::optional<std::string> code_revision;
  std::optional<std::string> tokenizer_revision;
  std::string tokenizer_mode = "auto";
  std::string config_format = "auto";  // auto / hf: config.json (or GGUF metadata)
  bool trust_remote_code = false;
  std::optional<std::string> download_dir;
  std::string load_format = "auto";
  std::string dtype = "auto";
  std::optional<int64_t> max_model_len;
  std::string guided_decoding_backend = "outlines";
  bool enforce_eager = false;  // Aphrodite's default is true; Cypris uses CUDA graphs unless told not to
  std::optional<int64_t> max_context_len_to_capture;
  int64_t max_seq_len_to_capture = 8192;
  int64_t max_log_probs = 10;
  bool skip_tokenizer_init = false;
  int64_t seed = 0;
  bool disable_sliding_window = false;
  std::string rope_scaling;  // JSON object text; empty = from config.json
  std::optional<double> rope_theta;
  std::vector<std::string> ignore_patterns;
  std::optional<int64_t> max_parallel_loading_workers;
  std::string model_loader_extra_config;  // JSON
  std::vector<std::string> served_model_name;
};

struct ParallelOptions {
  bool worker_use_ray = false;
  bool engine_use_ray = false;
  int64_t tensor_parallel_size = 1;
  int64_t pipeline_parallel_size = 1;
  bool ray_workers_use_nsight = false;
  bool disable_custom_all_reduce = false;
  std::optional<std::string> distributed_executor_backend;
  std::optional<std::string> override_neuron_config;  // JSON; vLLM's Neuron backend only
};

struct QuantizationOptions {
  std::string kv_cache_dtype = "auto";
  std::optional<std::string> quantization;
  bool load_in_4bit = false;
  bool load_in_smooth = false;
  bool load_in_8bit = false;
  std::optional<std::string> quantization_param_path;
};

struct CacheOptions {
  int64_t block_size = 16;
  bool context_shift = false;
  // How a shift treats the tokens after the kept prefix: "rotate" keeps their cached K/V, keys rotated
  // to the new positions (families with a plain position rotation); "recompute" computes them again.
  std::string context_shift_mode = "rotate";
  std::optional<int64_t> num_gpu_blocks_override;
  double swap_space = 4.0;  // GiB
  double gpu_memory_utilization = 0.9;
  // On by default, as in vLLM's V1 engine: a chat client re-sends the whole conversation every
  // turn, and only the new tokens are computed (--no-enable-prefix-caching turns it off).
  bool enable_prefix_caching = true;
  bool use_v2_block_manager = false;
  double cpu_offload_gb = 0.0;
  double cpu_kvcache_space = 4.0;  // GiB of KV cache on the CPU device
};

struct TokenizerPoolOptions {
  int64_t tokenizer_pool_size = 0;
  std::string tokenizer_pool_type = "ray";
  std::string tokenizer_pool_extra_config;  // JSON
};

struct SchedulerOptions {
  std::optional<int64_t> max_num_batched_tokens;
  int64_t max_num_seqs = 256;
  double scheduler_delay_factor = 0.0;
  std::string scheduling_policy = "fcfs";
  bool enable_chunked_prefill = true;          // as vLLM's V1 engine; --no-enable-chunked-prefill
  std::optional<std::string> preemption_mode;  // recompute | swap
  int64_t num_scheduler_steps = 1;
  int64_t num_lookahead_slots = 0;
  bool multi_step_stream_outputs = true;   // vLLM multi-step scheduling only
  bool disable_async_output_proc = false;  // outputs are always emitted on the engine thread
};

struct DeviceOptions {
  std::string device = "auto";
  std::optional<int64_t> threads;  // CPU backend worker threads; default: all cores
  std::optional<int64_t> gpu_layers;  // --gpu-layers: first N layers on the GPU, the rest on the CPU; -1 = auto
};

struct SpeculativeOptions {
  std::optional<std::string> speculative_model;
  std::optional<int64_t> num_speculative_tokens;
  std::optional<int64_t> speculative_max_model_len;
  std::optional<int64_t> speculative_disable_by_batch_size;
  std::optional<int64_t> ngram_prompt_lookup_max;
  std::optional<int64_t> ngram_prompt_lookup_min;
  std::optional<std::string> speculative_model_quantization;
  std::optional<int64_t> speculative_draft_tensor_parallel_size;
  bool speculative_disable_mqa_scorer = false;
  std::string spec_decoding_acceptance_method = "rejection_sampler";
  std::optional<double> typical_acceptance_sampler_posterior_threshold;
  std::optional<double> typical_acceptance_sampler_posterior_alpha;
  bool disable_logprobs_during_spec_decoding = false;
};

struct LoraOptions {
  bool enable_lora = false;
  int64_t max_loras = 1;
  int64_t max_lora_rank = 16;
  int64_t lora_extra_vocab_size = 256;
  std::string lora_dtype = "auto";
  std::optional<int64_t> max_cpu_loras;
  bool fully_sharded_loras = false;
  std::vector<std::string> long_lora_scaling_factors;
  std::optional<std::string> qlora_adapter_name_or_path;
  bool enable_prompt_adapter = false;
  int64_t max_prompt_adapters = 1;
  int64_t max_prompt_adapter_token = 0;
};

struct ServerOptions {
  std::string host = "localhost";
  int64_t port = 2242;
  bool allow_credentials = false;
  std::vector<std::string> allowed_origins = {"*"};
  std::vector<std::string> allowed_methods = {"*"};
  std::vector<std::string> allowed_headers = {"*"};
  std::vector<std::string> api_keys;
  std::optional<std::string> admin_key;
  bool launch_kobold_api = false;
  bool kobold_no_auth = false;  // leave the Kobold routes open (Kobold clients send no key)
  int64_t max_length = 256;
  std::vector<std::string> lora_modules;
  std::optional<std::string> chat_template;
  std::string response_role = "assistant";
  bool enable_auto_tool_choice = false;   // tool_choice "auto": parse tool calls out of the output
  std::optional<std::string> tool_call_parser;  // hermes, llama3_json, mistral; unset: from the chat template
  std::optional<std::string> ssl_keyfile;
  std::optional<std::string> ssl_certfile;
  std::optional<std::string> root_path;
  std::vector<std::string> middleware;
  int64_t max_request_body_mb = 32;
  int64_t max_connections = 0;             // 0: max(64, max_num_seqs + 32)
  int64_t max_connections_per_client = 0;  // 0: three quarters of max_connections
  double request_head_timeout = 10.0;      // seconds for a request's whole head
  int64_t max_tokenize_tokens = 0;         // 0: 4 x max_model_len
  int64_t max_prompts_per_request = 1024;  // prompts in one request's `prompt` list
  int64_t max_request_tokens = 0;          // prompt tokens of one request, all its prompts; 0: 16 x max_model_len
};

struct VisionOptions {
  std::optional<std::string> image_input_type;
  std::optional<int64_t> image_token_id;
  std::optional<std::string> image_input_shape;
  std::optional<int64_t> image_feature_size;
  std::optional<std::string> image_processor;
  std::optional<std::string> image_processor_revision;
  bool disable_image_processor = false;
  std::optional<std::string> limit_mm_per_prompt;  // "image=16,video=2"
  std::optional<std::string> mm_processor_kwargs;  // JSON
};

struct LoggingOptions {
  std::string log_level = "info";
  bool disable_log_stats = false;
  bool disable_log_requests = false;
  // Prompt characters in a request's log line: a bounded excerpt by default, so a huge prompt
  // does not become a huge log (Aphrodite prints everything unless this is set).
  std::optional<int64_t> max_log_len = 512;
  double log_stats_interval = 5.0;  // seconds between stats lines
  std::optional<std::string> otlp_traces_endpoint;
  std::optional<std::string> collect_detailed_traces;
};

struct AppOptions {
  bool no_ui = false;
  std::optional<std::string> config;  // the file the options were read from
};

struct EngineConfig {
  ModelOptions model;
  ParallelOptions parallel;
  QuantizationOptions quant;
  CacheOptions cache;
  TokenizerPoolOptions tokenizer_pool;
  SchedulerOptions scheduler;
  DeviceOptions device;
  SpeculativeOptions spec;
  LoraOptions lora;
  ServerOptions server;
  VisionOptions vision;
  LoggingOptions logging;
  AppOptions app;
};

}  // namespace cypris
