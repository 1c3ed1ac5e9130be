#include "engine/core/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <unordered_set>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/common/phase_timer.h"
#include "engine/core/draft_model_proposer.h"
#include "engine/core/engine_setup.h"
#include "engine/request/request.h"
#include "engine/core/request_tracker.h"
#include "engine/core/step_sampler.h"
#include "engine/loader/model_config.h"
#include "engine/loader/model_family.h"
#include "engine/backend/backend_factory.h"
#include "engine/runtime/model_runner.h"
#include "engine/sampling/sampler.h"
#include "engine/scheduler/scheduler.h"
#include "engine/core/lora_table.h"
#include "engine/hub/adapter_dir.h"
#include "engine/loader/lora_adapter.h"
#include "engine/spec/ngram_proposer.h"
#include "engine/spec/spec_config.h"
#include "engine/tokenizer/tokenizer.h"
#include "models/registry/registry.h"

namespace cypris {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

int64_t default_max_num_batched_tokens(const EngineConfig& cfg, int64_t max_model_len) {
  if (cfg.scheduler.max_num_batched_tokens) return *cfg.scheduler.max_num_batched_tokens;
  // vLLM V1's default (LLM class): a bounded budget with chunked prefill (decodes stay fast), else
  // room for the longest prompt in one step.
  if (cfg.scheduler.enable_chunked_prefill) return std::max<int64_t>(2048, cfg.scheduler.max_num_seqs);
  return std::max<int64_t>({max_model_len, 2048, cfg.scheduler.max_num_seqs});
}

}  // namespace

Engine::Engine(const EngineConfig& cfg) : cfg_(cfg) {
  PhaseTimer startup("engine start-up");
  const char* sync = std::getenv("CYPRIS_STEP_PROFILE_SYNC");
  profile_sync_ = sync && sync[0] == '1';
  const auto& mo = cfg.model;
  // Fails here, before any file is read, for --device cuda without CUDA in the build or without a GPU.
  const std::string device = resolve_device(cfg.device.device);
  const std::filesystem::path dir = resolve_model_path(mo);
  // Refuses speculative settings Cypris cannot run before anything is loaded.
  const std::optional<SpecDecodeConfig> spec = spec_decode_config(cfg);

  // The model's config is read once, here: the scheduler's budget needs its context length before
  // the runner profiles a step of that budget; the runner takes it as is.
  ModelRunnerOptions ro = runner_options(cfg, dir);
  ro.config = load_model_config(model_families(), dir, ro.load.overrides);
  const int64_t max_model_len = ro.config->max_model_len;
  const int64_t max_num_batched_tokens = default_max_num_batched_tokens(cfg, max_model_len);
  ro.device = device;
  ro.max_num_batched_tokens = max_num_batched_tokens;
  // A decode verifying drafts has up to k + 1 query tokens per sequence: graphs for those too.
  if (spec) ro.graph_max_query_len = static_cast<int>(spec->ngram.num_tokens) + 1;
  if (cfg.lora.enable_lora) {
    ro.max_loras = static_cast<int>(cfg.lora.max_loras);
    ro.max_lora_rank = cfg.lora.max_lora_rank;
  }
  CYPRIS_CHECK(ro.num_blocks <= INT32_MAX, "--num-gpu-blocks-override {} is more blocks than the scheduler counts ({})",
               ro.num_blocks, INT32_MAX);

  startup.mark("model path and config");  // a Hub download, if any, is here
  if (!mo.skip_tokenizer_init) {
    const std::string tok_dir = mo.tokenizer.value_or(dir.string());
    TokenizerOptions to;
    to.mode = mo.tokenizer_mode;
    tokenizer_ = load_tokenizer(resolve_local_model_dir(tok_dir, mo.tokenizer_revision, mo.download_dir), to);
  }
  // Checks the tensor-parallel layout and sizes the KV cache (for every device).
  startup.mark("tokenizer");
  runner_ = std::make_unique<ModelRunner>(ro);
  startup.mark("model");
  const int64_t num_blocks = runner_->num_blocks();
  const double block_bytes = static_cast<double>(runner_->kv_cache_bytes_per_block());

  SchedulerConfig sc;
  sc.max_model_len = static_cast<int32_t>(max_model_len);
  sc.max_num_batched_tokens = static_cast<int32_t>(max_num_batched_tokens);
  sc.max_num_seqs = static_cast<int32_t>(cfg.scheduler.max_num_seqs);
  sc.enable_chunked_prefill = cfg.scheduler.enable_chunked_prefill;
  sc.policy = parse_scheduling_policy(cfg.scheduler.scheduling_policy);
  sc.preemption_mode = parse_preemption_mode(cfg.scheduler.preemption_mode.value_or("recompute"));
  sc.delay_factor = cfg.scheduler.scheduler_delay_factor;
  sc.block_size = static_cast<int32_t>(cfg.cache.block_size);
  sc.num_gpu_blocks = static_cast<int32_t>(num_blocks);
  sc.enable_prefix_caching = cfg.cache.enable_prefix_caching;
  sc.context_shift = cfg.cache.context_shift;
  sc.num_lookahead_slots = spec ? spec->lookahead_slots : 0;
  sc.context_shift_rotate =
      cfg.cache.context_shift && cfg.cache.context_shift_mode == "rotate" && runner_->can_rotate_kv();
  if (cfg.cache.context_shift && cfg.cache.context_shift_mode == "rotate" && !sc.context_shift_rotate)
    LOG_INFO("--context-shift: this model's cached keys cannot be rotated (its rotary is not one position-only "
             "rotation on every layer, or it runs across processes); shifted tokens are computed again, and a "
             "prompt that repeats a stretch of a finished sequence is computed in full");
  if (sc.preemption_mode == PreemptionMode::Swap) {
    sc.num_cpu_blocks = static_cast<int32_t>(cfg.cache.swap_space * kGiB / block_bytes);
    runner_->allocate_swap_space(sc.num_cpu_blocks);
  }
  scheduler_ = std::make_unique<Scheduler>(sc);

  SamplerConfig samp;
  samp.vocab_size = static_cast<int32_t>(runner_->config().vocab_size);
  samp.max_log_probs = static_cast<int>(cfg.model.max_log_probs);
  // Rows are sampled in parallel on the CPU threads (the model is idle meanwhile).
  samp.num_threads = static_cast<int>(cfg.device.threads.value_or(std::max(1u, std::thread::hardware_concurrency())));
  std::vector<int32_t> eos_ids = runner_->config().eos_token_ids;
  if (tokenizer_ && tokenizer_->eos_id() &&
      std::find(eos_ids.begin(), eos_ids.end(), *tokenizer_->eos_id()) == eos_ids.end()) {
    eos_ids.push_back(*tokenizer_->eos_id());
  }
  if (!eos_ids.empty()) samp.eos_token_id = eos_ids.front();
  sampler_ = std::make_unique<Sampler>(samp);

  info_.model = mo.model;
  info_.served_names = mo.served_model_name.empty() ? std::vector<std::string>{mo.model} : mo.served_model_name;
  info_.max_model_len = max_model_len;
  info_.context_shift = cfg.cache.context_shift;
  info_.vocab_size = runner_->config().vocab_size;
  info_.dtype = std::string(dtype_name(runner_->weight_dtype()));
  info_.device = runner_->backend().name();

  TrackerConfig tc;
  tc.vocab_size = info_.vocab_size;
  tc.max_model_len = max_model_len;
  tc.max_log_probs = static_cast<int>(cfg.model.max_log_probs);
  tc.max_num_seqs = cfg.scheduler.max_num_seqs;
  tc.logging = cfg.logging;
  tc.guided_backend = cfg.model.guided_decoding_backend;
  tc.spec_decode = spec.has_value();
  if (spec) {
    tc.spec_num_tokens = spec->ngram.num_tokens;
    tc.spec_acceptance = spec->acceptance;
    tc.typical_threshold = spec->typical_threshold;
    tc.typical_alpha = spec->typical_alpha;
  }
  tc.seed = static_cast<uint64_t>(cfg.model.seed);
  tracker_ = std::make_unique<RequestTracker>(tc, *scheduler_, *sampler_, tokenizer_.get(), std::move(eos_ids));
  step_sampler_ = std::make_unique<StepSampler>(*runner_, *sampler_, *tracker_, tc.max_log_probs);

  if (spec && spec->draft_model_proposer()) {
    draft_ = load_draft_model(cfg, *spec, *runner_, ro.mpi, tokenizer_.get(), *sampler_, max_num_batched_tokens);
    spec_disable_by_batch_size_ = spec->disable_by_batch_size;
    startup.mark("draft model");
  } else if (spec) {
    proposer_ = std::make_unique<NgramProposer>(spec->ngram);
    spec_disable_by_batch_size_ = spec->disable_by_batch_size;
    LOG_INFO("speculative decoding: prompt lookup, up to {} tokens from {}..{}-grams", spec->ngram.num_tokens,
             spec->ngram.min_n, spec->ngram.max_n);
  }

  if (cfg.lora.enable_lora) {
    const int64_t max_cpu_loras = cfg.lora.max_cpu_loras.value_or(cfg.lora.max_loras);
    CYPRIS_CHECK(max_cpu_loras >= cfg.lora.max_loras && max_cpu_loras <= INT32_MAX,
                 "--max-cpu-loras {} must be at least --max-loras {}", max_cpu_loras, cfg.lora.max_loras);
    lora_ = std::make_unique<LoraTable>(static_cast<int>(cfg.lora.max_loras), static_cast<int>(max_cpu_loras));
    // A request is admitted once its adapter holds a device slot (put there now if one can be had).
    scheduler_->set_admission_check([this](Request& r) { return place_lora(r); });
    for (const std::string& spec : cfg.server.lora_modules) {
      const auto [name, path] = parse_lora_module(spec);
      add_lora(name, read_lora(path));
    }
    if (const auto& q = cfg.lora.qlora_adapter_name_or_path) {
      // vLLM's QLoRA flag names the adapter trained over a quantized base; here it is served like a
      // --lora-modules entry named after its folder or repo ("org/name@rev" -> "name").
      std::string name = q->substr(0, q->find('@'));
      while (name.size() > 1 && name.back() == '/') name.pop_back();
      name = name.substr(name.find_last_of('/') + 1);
      if (name.ends_with(".gguf")) name.resize(name.size() - 5);
      add_lora(name, read_lora(*q));
    }
    LOG_INFO("LoRA: {} adapter slots on the device, up to {} adapters in host memory, rank <= {}; {} loaded at start",
             cfg.lora.max_loras, max_cpu_loras, cfg.lora.max_lora_rank, cfg.server.lora_modules.size());
  }

  const double max_concurrency = static_cast<double>(num_blocks) * ro.block_size / static_cast<double>(max_model_len);
  LOG_INFO("KV cache: {} blocks of {} tokens ({:.2f} GiB); maximum concurrency for {} tokens per request: {:.2f}x",
           num_blocks, ro.block_size, num_blocks * block_bytes / kGiB, max_model_len, max_concurrency);
  startup.log();
}

Engine::~Engine() = default;

int64_t Engine::num_kv_blocks() const { return runner_->num_blocks(); }

const SamplingState* Engine::sampling_state(const std::string& request_id) const {
  return tracker_->sampling_state(request_id);
}

void Engine::set_debug_hook(std::function<void(const std::string&, const Tensor&)> hook) {
  runner_->set_debug_hook(std::move(hook));
}

void Engine::add_request(GenerateRequest req, std::shared_ptr<RequestStream> stream) {
  req.lora_slot = -1;
  req.lora_id = 0;
  if (!req.lora_name.empty()) {
    const LoraTable::Entry* e = lora_ ? lora_->find(req.lora_name) : nullptr;
    CYPRIS_CHECK(e, "the LoRA adapter '{}' is not loaded", req.lora_name);
    req.lora_id = e->info.id;
    // Dropped from host memory (--max-cpu-loras): read again, and kept while the request needs it.
    std::shared_ptr<const LoraAdapter> copy;
    if (!e->adapter) {
      copy = std::make_shared<const LoraAdapter>(read_lora(e->info.path));
      runner_->check_lora(*copy);
      LOG_INFO("LoRA adapter '{}' read again from {} (it had left host memory)", req.lora_name, e->info.path);
    }
    lora_->use_host_copy(req.lora_id, std::move(copy));
  }
  tracker_->add(std::move(req), std::move(stream));
  if (lora_) lora_->trim_host([&](uint64_t id) { return tracker_->uses_lora(id); });
}

std::vector<LoraInfo> Engine::loras() const { return lora_ ? lora_->list() : std::vector<LoraInfo>{}; }

size_t Engine::lora_device_bytes() const { return runner_->lora_device_bytes(); }

LoraAdapter Engine::read_lora(const std::string& path_or_repo) const {
  // A Hub repo id ("org/name[@revision]") is fetched (adapter files only) or found in the cache.
  const std::string path = hub::resolve_adapter_dir(path_or_repo);
  LoraAdapter a = load_lora_adapter(path, cfg_.lora.max_lora_rank);
  if (a.gguf_arch.empty()) return a;
  const ModelConfig& mc = runner_->config();
  const ModelFamily* family = find_family(model_families(), mc.architectures);
  const GgufArchitecture* arch = nullptr;
  std::string archs;
  for (const GgufArchitecture& g : family ? family->gguf : std::vector<GgufArchitecture>{}) {
    archs += (archs.empty() ? "" : ", ") + std::string(g.gguf_arch);
    if (g.gguf_arch == a.gguf_arch) arch = &g;
  }
  CYPRIS_CHECK(arch, "{}: a LoRA adapter for llama.cpp architecture '{}', but the model is {} (llama.cpp: {})", path,
               a.gguf_arch, mc.architectures.empty() ? std::string("?") : mc.architectures.front(),
               archs.empty() ? std::string("none") : archs);
  if (arch->permuted_qk) undo_gguf_qk_permutation(a, mc.num_attention_heads, mc.num_key_value_heads);
  // llama.cpp names a fused gate_up projection (Phi-3's) ffn_up, read as up_proj; its B is twice the
  // MLP's width, gate rows first as in Hugging Face's gate_up_proj.
  std::vector<std::string> fused;
  for (const auto& [module, m] : a.modules) {
    if (module.ends_with(".mlp.up_proj") && mc.intermediate_size > 0 && m.b.shape[0] == 2 * mc.intermediate_size) {
      fused.push_back(module);
    }
  }
  for (const std::string& module : fused) {
    auto node = a.modules.extract(module);
    node.key() = module.substr(0, module.size() - std::string("up_proj").size()) + "gate_up_proj";
    a.modules.insert(std::move(node));
  }
  return a;
}

void Engine::add_lora(const std::string& name, LoraAdapter&& adapter) {
  add_lora(name, std::make_shared<const LoraAdapter>(std::move(adapter)));
}

void Engine::add_lora(const std::string& name, std::shared_ptr<const LoraAdapter> adapter) {
  CYPRIS_CHECK(lora_, "LoRA adapters need --enable-lora (cannot load '{}')", name);
  CYPRIS_CHECK(!name.empty() && name.size() <= 256, "a LoRA adapter's name must have 1 to 256 characters");
  for (const std::string& served : info_.served_names) {
    CYPRIS_CHECK(name != served, "the LoRA adapter name '{}' is the base model's name; choose another", name);
  }
  CYPRIS_CHECK(!lora_->find(name), "a LoRA adapter named '{}' is already loaded; unload it first", name);
  runner_->check_lora(*adapter);
  // The adapter's stacked weights are allocated now, so a later swap into a slot allocates nothing.
  runner_->reserve_lora(*adapter);
  const LoraAdapter& a = *adapter;
  const uint64_t id = lora_->add(name, a.path, a.rank, adapter).info.id;
  // An empty slot takes it at once; otherwise it is swapped in when a request needs it.
  const int slot = lora_->empty_slot();
  if (slot >= 0) {
    runner_->load_lora(slot, a);
    lora_->occupy(slot, id);
  }
  const std::vector<uint64_t> dropped = lora_->trim_host([&](uint64_t i) { return tracker_->uses_lora(i); });
  LOG_INFO("LoRA adapter '{}' loaded from {} (rank {}, scale {}, {} modules, {:.1f} MiB){}", name, a.path, a.rank,
           a.scale, a.modules.size(), static_cast<double>(a.nbytes()) / (1 << 20),
           slot >= 0 ? fmt::format(" into slot {}", slot) : std::string(", in host memory until a request needs it"));
  if (!dropped.empty()) LOG_INFO("LoRA: {} adapter(s) left host memory (--max-cpu-loras {})", dropped.size(), lora_->max_cpu_loras());
}

bool Engine::remove_lora(const std::string& name) {
  if (!lora_ || !lora_->remove(name)) return false;
  // Requests still using it keep its weights and slot until they finish.
  lora_->collect([&](uint64_t id) { return tracker_->uses_lora(id); });
  LOG_INFO("LoRA adapter '{}' unloaded", name);
  return true;
}

bool Engine::place_lora(Request& r) {
  const uint64_t id = tracker_->lora_id_of(r.request_id());
  if (id == 0) {
    r.set_lora_slot(-1);
    return true;
  }
  // Slots of running requests are busy: their rows in this and later steps read them.
  std::vector<bool> busy(static_cast<size_t>(lora_->max_loras()), false);
  for (const auto& other : scheduler_->running()) {
    if (other->lora_slot() >= 0) busy[static_cast<size_t>(other->lora_slot())] = true;
  }
  const std::optional<LoraTable::Placement> p = lora_->place(id, [&](int s) { return busy[static_cast<size_t>(s)]; });
  if (!p) return false;  // every slot serves running requests: wait
  if (p->load) {
    const LoraTable::Entry* e = lora_->by_id(id);
    // Requests that name an adapter pin its host copy (trim_host), so it is here.
    CYPRIS_CHECK(e && e->adapter, "LoRA adapter id {}: no host copy to load into a slot", id);
    runner_->load_lora(p->slot, *e->adapter);
    lora_->occupy(p->slot, id);
    ++lora_swaps_;
    LOG_DEBUG("LoRA adapter '{}' swapped into slot {}", e->info.name, p->slot);
  } else {
    lora_->touch_slot(p->slot);
  }
  r.set_lora_slot(p->slot);
  return true;
}

void Engine::abort_request(const std::string& request_id) {
  tracker_->abort(request_id);
}

bool Engine::has_unfinished_requests() const {
  return tracker_->has_unfinished();
}

// schedule -> execute -> sample -> update -> emit outputs.
namespace {
double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

void Engine::step() {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (proposer_ || draft_) propose_drafts();
  SchedulerOutput so = scheduler_->schedule();
  for (const ContextReuse& r : so.context_reuses) {
    LOG_INFO("request {}: --context-shift reused the KV of {} prompt tokens of a finished sequence ({} at their "
             "positions, {} moved {} positions down with their keys rotated); {} from the prefix cache, {} to compute",
             r.request_id, r.same + r.moved, r.same, r.moved, r.distance, r.cached, r.computed);
  }
  if (so.empty()) return;
  const auto t1 = Clock::now();
  const int64_t prompt_before = prompt_tokens_total_;
  prepare(so);
  // Which logits rows the step computes and where each is sampled (written into so.batch).
  const StepRows rows = tracker_->plan_rows(so, so.batch, step_sampler_->device_sampling());
  const auto t2 = Clock::now();
  std::vector<SampleOutput> samples;
  try {
    const StepLogits logits = execute(so.batch);
    const auto ts = Clock::now();
    samples = step_sampler_->sample(logits, rows);
    profile_.sample += seconds_between(ts, Clock::now());
  } catch (const std::exception& e) {
    // An engine fault fails the requests of this step; the engine keeps serving others.
    LOG_ERROR("model step failed: {}", e.what());
    tracker_->fail_step(so, e.what());
    return;
  }
  const auto t3 = Clock::now();
  const std::vector<StepResult> results = tracker_->check_sampled(rows, samples);
  const std::vector<RequestUpdate> updates = scheduler_->update_from_output(so, results);
  tracker_->emit_outputs(rows, samples, updates);
  if (lora_) {
    // Unloaded adapters whose requests are done go; host copies requests held past the cap too.
    const auto used = [&](uint64_t id) { return tracker_->uses_lora(id); };
    if (lora_->has_unlisted()) lora_->collect(used);
    if (lora_->num_host_copies() > lora_->max_cpu_loras()) lora_->trim_host(used);
  }
  const auto t4 = Clock::now();
  ++profile_.steps;
  if (prompt_tokens_total_ == prompt_before) ++profile_.decode_steps;
  profile_.schedule += seconds_between(t0, t1);
  profile_.plan += seconds_between(t1, t2);
  profile_.update += seconds_between(t3, t4);
}

void Engine::propose_drafts() {
  const auto& running = scheduler_->running();
  const bool on = !spec_disable_by_batch_size_ || static_cast<int64_t>(running.size()) <= *spec_disable_by_batch_size_;
  std::vector<DraftInput> inputs;
  std::vector<Request*> drafted;
  for (const auto& r : running) {
    const std::string& id = r->request_id();
    const bool decodes = r->num_computed_tokens() == r->num_tokens() - 1;
    r->set_spec_token_ids({});
    if (!on || !decodes || !tracker_->may_speculate(id)) continue;
    // The adaptive draft length, within max_tokens (the last token comes from the target).
    const int32_t want = std::min(tracker_->spec_draft_length(id), r->max_tokens() - r->num_output_tokens() - 1);
    if (proposer_) {
      r->set_spec_token_ids(tracker_->trim_drafts(id, proposer_->propose(r->all_token_ids(), want)));
      continue;
    }
    inputs.push_back(DraftInput{id, r->all_token_ids(), tracker_->sampling_params(id), tracker_->sampling_state(id),
                                std::max(0, want)});
    drafted.push_back(r.get());
  }
  if (!draft_) return;
  std::vector<DraftProposal> proposals = draft_->propose(inputs);
  for (size_t i = 0; i < drafted.size(); ++i) {
    // The draft's q stays whole: verification reads it only up to the kept drafts.
    drafted[i]->set_spec_token_ids(tracker_->trim_drafts(drafted[i]->request_id(), std::move(proposals[i].tokens)));
    tracker_->set_draft_probs(drafted[i]->request_id(), std::move(proposals[i].probs));
  }
  // The draft cache of sequences that finished or were preempted goes back.
  std::unordered_set<std::string> live;
  for (const auto& r : running) live.insert(r->request_id());
  draft_->retain(live);
}

void Engine::prepare(const SchedulerOutput& so) {
  runner_->move_kv_slots(so.kv_moves);  // first: a shift's old blocks may be swapped or copied into next
  swap_outs_total_ += static_cast<int64_t>(so.swapped_out_ids.size());
  runner_->swap_out(so.blocks_to_swap_out);
  runner_->swap_in(so.blocks_to_swap_in);
  runner_->copy_blocks(so.blocks_to_copy);
  if (lora_) {
    // Never a wrong adapter: each scheduled request's slot holds its adapter.
    for (const auto& sr : so.scheduled) {
      const uint64_t id = tracker_->lora_id_of(sr.request->request_id());
      const int32_t slot = sr.request->lora_slot();
      CYPRIS_CHECK(id == 0 ? slot < 0 : (slot >= 0 && lora_->slot_holder(slot) == id),
                   "request {}: LoRA slot {} does not hold its adapter (id {})", sr.request->request_id(), slot, id);
    }
  }
  for (const auto& sr : so.scheduled) {  // prompt tokens computed this step (for throughput)
    const int32_t end = std::min(sr.num_computed_tokens + sr.num_scheduled_tokens, sr.request->num_prompt_tokens());
    prompt_tokens_total_ += std::max(0, end - sr.num_computed_tokens);
  }
}

StepLogits Engine::execute(const BatchContext& batch) {
  const auto t0 = std::chrono::steady_clock::now();
  StepLogits logits = runner_->execute_step(batch);
  if (profile_sync_) runner_->synchronize();
  profile_.execute += seconds_between(t0, std::chrono::steady_clock::now());
  if (runner_->pipeline_parallel_size() > 1) {
    profile_.stages.clear();
    for (const StageStats& st : runner_->stage_stats()) {
      profile_.stages.emplace_back(fmt::format("layers [{}, {}) on {}", st.first_layer, st.end_layer, st.device),
                                   st.busy_seconds);
    }
    profile_.pipeline = runner_->pipeline_seconds();
  }
  return logits;
}

EngineStats Engine::stats() const {
  const SchedulerStats ss = scheduler_->stats();
  EngineStats s;
  s.num_running = ss.num_running;
  s.num_waiting = ss.num_waiting;
  s.num_swapped = ss.num_swapped;
  s.kv_cache_usage = ss.kv_cache_usage;
  s.cpu_swap_usage = ss.cpu_kv_cache_usage;
  s.prefix_cache_hit_rate = ss.prefix_cache_hit_rate;
  s.num_preemptions_total = ss.num_preemptions;
  s.num_swap_outs_total = swap_outs_total_;
  s.num_context_shifts_total = ss.num_context_shifts;
  s.context_shift_moved_tokens_total = ss.num_context_shift_moves;
  s.context_reuses_total = ss.num_context_reuses;
  s.context_reused_tokens_total = ss.num_context_reuse_tokens;
  s.context_reuse_moved_tokens_total = ss.num_context_reuse_moved;
  s.prompt_tokens_total = prompt_tokens_total_;
  s.generation_tokens_total = tracker_->num_generated_tokens();
  if (proposer_ || draft_) {
    const auto& c = tracker_->spec_counters();
    s.spec_decode = true;
    s.spec_draft_tokens_total = c.draft_tokens;
    s.spec_accepted_tokens_total = c.accepted_tokens;
    s.spec_emitted_tokens_total = c.emitted_tokens;
    s.spec_max_emitted_tokens_total = c.draft_tokens + c.verifications;
  }
  // Throughput over windows of at least a second (stats() is read after every step).
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - last_stats_time_).count();
  if (dt >= 1.0) {
    prompt_rate_ = static_cast<double>(prompt_tokens_total_ - last_prompt_tokens_) / dt;
    generation_rate_ = static_cast<double>(s.generation_tokens_total - last_generation_tokens_) / dt;
    last_stats_time_ = now;
    last_prompt_tokens_ = prompt_tokens_total_;
    last_generation_tokens_ = s.generation_tokens_total;
  }
  s.prompt_tokens_per_s = prompt_rate_;
  s.generation_tokens_per_s = generation_rate_;
  return s;
}

ModelInfo Engine::model_info() const { return info_; }

}  // namespace cypris
