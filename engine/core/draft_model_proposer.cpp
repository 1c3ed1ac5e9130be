// DraftModelProposer (draft_model_proposer.h).
#include "engine/core/draft_model_proposer.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/core/engine_setup.h"
#include "engine/loader/model_config.h"
#include "engine/sampling/sampler.h"
#include "engine/spec/rejection_sampler.h"
#include "engine/spec/spec_config.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/common/philox.h"
#include "models/registry/registry.h"

namespace cypris {

DraftModelProposer::DraftModelProposer(std::unique_ptr<ModelRunner> runner, Sampler& sampler, DraftModelConfig config)
    : runner_(std::move(runner)), sampler_(sampler), config_(config) {
  block_size_ = runner_->block_size();
  vocab_ = static_cast<int32_t>(runner_->config().vocab_size);
  CYPRIS_CHECK(vocab_ == sampler_.config().vocab_size,
               "the draft model has a vocabulary of {} tokens, the target {}: they must share one", vocab_,
               sampler_.config().vocab_size);
  config_.max_num_batched_tokens = std::max<int64_t>(config_.max_num_batched_tokens, 1);
  free_.reserve(static_cast<size_t>(runner_->num_blocks()));
  for (int64_t b = runner_->num_blocks() - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

DraftModelProposer::~DraftModelProposer() = default;

bool DraftModelProposer::reserve(Seq& s, int32_t num_tokens) {
  const size_t need = static_cast<size_t>((num_tokens + block_size_ - 1) / block_size_);
  if (need <= s.blocks.size()) return true;
  if (need - s.blocks.size() > free_.size()) return false;
  while (s.blocks.size() < need) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void DraftModelProposer::retain(const std::unordered_set<std::string>& live) {
  for (auto it = seqs_.begin(); it != seqs_.end();) {
    if (live.count(it->first)) {
      ++it;
      continue;
    }
    free_.insert(free_.end(), it->second.blocks.begin(), it->second.blocks.end());
    it = seqs_.erase(it);
  }
}

Logits DraftModelProposer::forward(const std::vector<Run>& runs) {
  BatchContext b;
  for (const Run& r : runs) b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, int32_t(r.seq->blocks.size()));
  b.query_start_loc.push_back(0);
  for (const Run& r : runs) {
    const auto& blocks = r.seq->blocks;
    for (size_t t = 0; t < r.tokens.size(); ++t) {
      const int32_t pos = r.start + static_cast<int32_t>(t);
      b.token_ids.push_back(r.tokens[t]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(int64_t(blocks[size_t(pos / block_size_)]) * block_size_ + pos % block_size_);
    }
    const int32_t seq_len = r.start + static_cast<int32_t>(r.tokens.size());
    b.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.seq_lens.push_back(seq_len);
    for (int32_t i = 0; i < b.max_blocks_per_seq; ++i) {
      b.block_tables.push_back(size_t(i) < blocks.size() ? blocks[size_t(i)] : -1);
    }
    b.max_query_len = std::max(b.max_query_len, static_cast<int32_t>(r.tokens.size()));
    b.max_seq_len = std::max(b.max_seq_len, seq_len);
    // Every run gets its last row (cheap: the draft's head over a few rows); the caller keeps those it needs.
    b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
  }
  return runner_->execute(b);
}

std::vector<DraftProposal> DraftModelProposer::propose(std::span<const DraftInput> inputs) {
  std::vector<DraftProposal> out(inputs.size());
  struct Active {
    size_t index;
    Seq* seq;
    int32_t n;  // the sequence's tokens
    int32_t k;  // drafts wanted
    SamplingState state;
    std::vector<float> logits;  // the draft's logits for the next position
  };
  std::vector<Active> active;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DraftInput& in = inputs[i];
    const int32_t n = static_cast<int32_t>(in.tokens.size());
    // Drafting k tokens writes positions up to n + k - 2 and attends over n + k - 1 tokens.
    const int64_t k = std::min<int64_t>({in.max_tokens, config_.num_tokens, config_.max_model_len - n + 1});
    if (k <= 0 || n == 0) continue;
    Seq& s = seqs_[in.request_id];
    size_t common = 0;
    while (common < s.cached.size() && common < in.tokens.size() && s.cached[common] == in.tokens[common]) ++common;
    s.cached.resize(std::min(common, in.tokens.size() - 1));     // at least the last token is fed
    if (!reserve(s, n + static_cast<int32_t>(k) - 1)) continue;  // no room in the draft's cache this step
    active.push_back(Active{i, &s, n, static_cast<int32_t>(k), *in.state, {}});
  }
  if (active.empty()) return out;

  // Catch-up: the tokens each sequence's draft cache lacks, in forwards of at most
  // max_num_batched_tokens tokens; the forward that reaches a sequence's last token gives its logits.
  std::vector<int32_t> done(active.size());
  for (size_t a = 0; a < active.size(); ++a) done[a] = static_cast<int32_t>(active[a].seq->cached.size());
  for (size_t first = 0; first < active.size();) {
    std::vector<Run> runs;
    std::vector<size_t> owner;
    int64_t budget = config_.max_num_batched_tokens;
    for (size_t a = first; a < active.size() && budget > 0; ++a) {
      const int32_t rest = active[a].n - done[a];
      if (rest <= 0) continue;
      const int32_t take = static_cast<int32_t>(std::min<int64_t>(rest, budget));
      const auto& toks = inputs[active[a].index].tokens;
      runs.push_back(Run{active[a].seq, done[a],
                         std::vector<int32_t>(toks.begin() + done[a], toks.begin() + done[a] + take), false});
      owner.push_back(a);
      done[a] += take;
      budget -= take;
    }
    if (runs.empty()) break;
    const Logits lg = forward(runs);
    for (size_t r = 0; r < runs.size(); ++r) {
      Active& act = active[owner[r]];
      if (done[owner[r]] < act.n) continue;
      act.logits.assign(lg.row(int64_t(r)), lg.row(int64_t(r)) + vocab_);
      const auto& toks = inputs[act.index].tokens;
      act.seq->cached.assign(toks.begin(), toks.end());
    }
    while (first < active.size() && done[first] >= active[first].n) ++first;
  }

  // k draft positions: draw from q, then feed the draw to get the next position's logits.
  for (int32_t step = 0;; ++step) {
    std::vector<Run> runs;
    std::vector<size_t> owner;
    for (size_t a = 0; a < active.size(); ++a) {
      Active& act = active[a];
      if (step >= act.k) continue;
      const DraftInput& in = inputs[act.index];
      std::vector<float> q = sampler_.probabilities(act.logits, *in.params, act.state);
      const double u = philox_uniform(act.state.stream_key() ^ kDraftDrawKeyMix, act.state.output_ids().size(), 0);
      const int32_t d = draw_from_distribution(q, u);
      DraftProposal& p = out[act.index];
      p.tokens.push_back(d);
      p.probs.insert(p.probs.end(), q.begin(), q.end());
      act.state.append(d);
      if (step + 1 < act.k) {
        runs.push_back(Run{act.seq, act.n + step, {d}, true});
        owner.push_back(a);
      }
    }
    if (runs.empty()) break;
    const Logits lg = forward(runs);
    for (size_t r = 0; r < runs.size(); ++r) {
      Active& act = active[owner[r]];
      act.logits.assign(lg.row(int64_t(r)), lg.row(int64_t(r)) + vocab_);
      act.seq->cached.push_back(runs[r].tokens.front());
    }
  }
  return out;
}

std::unique_ptr<DraftModelProposer> load_draft_model(const EngineConfig& cfg, const SpecDecodeConfig& spec,
                                                     const ModelRunner& target, bool target_in_processes,
                                                     const Tokenizer* target_tokenizer, Sampler& sampler,
                                                     int64_t max_num_batched_tokens) {
  // The draft's ranks are threads of this process; under MPI that is process 0, which cannot
  // reach the other processes' memory, so there the draft runs unsharded.
  int32_t draft_tp = spec.draft_tp;
  if (target_in_processes && draft_tp > 1) {
    CYPRIS_CHECK(!spec.draft_tp_given,
                 "--speculative-draft-tensor-parallel-size {} with --distributed-executor-backend mpi: the draft "
                 "model runs in process 0 only (the other processes hold the target's shards); use "
                 "--speculative-draft-tensor-parallel-size 1",
                 draft_tp);
    LOG_INFO("speculative decoding: the draft model runs unsharded in process 0 (MPI processes hold the target)");
    draft_tp = 1;
  }
  ModelOptions mo = cfg.model;
  mo.model = spec.draft_model;
  mo.gguf_file.reset();
  mo.revision.reset();
  mo.tokenizer.reset();
  mo.max_model_len = spec.draft_max_model_len;
  std::filesystem::path dir;
  try {
    dir = resolve_model_path(mo);
  } catch (const Error& e) {
    throw Error(fmt::format("--speculative-model {}: the draft model cannot be found or loaded: {}", spec.draft_model,
                            e.what()));
  }
  EngineConfig dcfg = cfg;
  dcfg.model = mo;
  dcfg.quant.quantization = spec.draft_quantization;
  dcfg.parallel.tensor_parallel_size = draft_tp;
  dcfg.parallel.pipeline_parallel_size = 1;  // the draft is small: its layers stay together
  ModelRunnerOptions ro = runner_options(dcfg, dir, /*ranks_in_this_process=*/true);
  ro.config = load_model_config(model_families(), dir, ro.load.overrides);
  const std::string& target_name = cfg.model.model;
  CYPRIS_CHECK(ro.config->vocab_size == target.config().vocab_size,
               "--speculative-model {}: its vocabulary has {} tokens, the target's (--model {}) {}; a draft model "
               "must share the target's tokenizer",
               spec.draft_model, ro.config->vocab_size, target_name, target.config().vocab_size);
  if (target_tokenizer && !cfg.model.skip_tokenizer_init) {
    std::unique_ptr<Tokenizer> draft_tok;
    try {
      draft_tok = load_tokenizer(resolve_local_model_dir(dir.string(), std::nullopt, mo.download_dir));
    } catch (const std::exception& e) {
      LOG_WARN(
          "--speculative-model {}: no tokenizer to compare with the target's ({}); checked the vocabulary size only",
          spec.draft_model, e.what());
    }
    if (draft_tok) {
      const int32_t n = std::min(draft_tok->vocab_size(), target_tokenizer->vocab_size());
      for (int32_t id = 0; id < n; ++id) {
        CYPRIS_CHECK(draft_tok->id_to_piece(id) == target_tokenizer->id_to_piece(id),
                     "--speculative-model {}: token {} is \"{}\" in its tokenizer and \"{}\" in the target's "
                     "(--model {}); a draft model must share the target's tokenizer",
                     spec.draft_model, id, draft_tok->id_to_piece(id), target_tokenizer->id_to_piece(id), target_name);
      }
    }
  }
  DraftModelConfig dc;
  dc.num_tokens = spec.ngram.num_tokens;
  dc.max_model_len = ro.config->max_model_len;
  dc.max_num_batched_tokens = max_num_batched_tokens;
  ro.max_num_batched_tokens = max_num_batched_tokens;
  // The draft's one-token decodes (k - 1 a step) replay CUDA graphs as the target's do; its first
  // forward of a step (the tokens its cache lacks) runs eagerly.
  ro.enforce_eager = cfg.model.enforce_eager;
  ro.graph_max_query_len = 1;
  // As many tokens as the target's cache holds, plus each sequence's drafts past them.
  const int64_t per_seq = (spec.ngram.num_tokens + ro.block_size - 1) / ro.block_size + 1;
  ro.num_blocks = target.num_blocks() + std::min<int64_t>(cfg.scheduler.max_num_seqs, target.num_blocks()) * per_seq;
  auto runner = std::make_unique<ModelRunner>(ro);
  LOG_INFO("speculative decoding: draft model {} ({} layers{}), up to {} tokens a step, {} KV blocks", spec.draft_model,
           runner->config().num_hidden_layers,
           draft_tp > 1 ? fmt::format(", tensor-parallel over {} ranks", draft_tp) : std::string(), dc.num_tokens,
           runner->num_blocks());
  return std::make_unique<DraftModelProposer>(std::move(runner), sampler, dc);
}

}  // namespace cypris
