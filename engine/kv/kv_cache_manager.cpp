// KvCacheManager: block tables, prefix-cache lookups, copy-on-write and swapping.
#include "engine/kv/kv_cache_manager.h"

#include <algorithm>
#include <stdexcept>

#include "engine/common/error.h"

namespace cypris {

void KvCacheConfig::validate() const {
  bool ok = std::find(std::begin(kAllowedBlockSizes), std::end(kAllowedBlockSizes), block_size) !=
            std::end(kAllowedBlockSizes);
  CYPRIS_CHECK(ok, "--block-size must be one of 8, 16, 32, got {}", block_size);
  CYPRIS_CHECK(num_gpu_blocks >= 1,
               "the KV cache has {} GPU blocks (--num-gpu-blocks-override, or too little memory left by "
               "--gpu-memory-utilization); at least 1 is needed",
               num_gpu_blocks);
  CYPRIS_CHECK(num_cpu_blocks >= 0, "the CPU swap pool (--swap-space) must have >= 0 blocks, got {}", num_cpu_blocks);
}

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : block_size_((config.validate(), config.block_size)),
      gpu_(config.num_gpu_blocks, config.block_size, config.enable_prefix_caching),
      cpu_(config.num_cpu_blocks, config.block_size, false) {}

uint64_t KvCacheManager::parent_hash(const Request& request, int32_t block_index) const {
  return block_index == 0 ? kNoParentHash : request.block_hashes()[size_t(block_index - 1)];
}

void KvCacheManager::ensure_hashes(Request& request, int32_t n) const {
  auto& hashes = request.block_hashes();
  auto tokens = request.all_token_ids();
  for (int32_t i = int32_t(hashes.size()); i < n; ++i) {
    auto block = tokens.subspan(size_t(i) * size_t(block_size_), size_t(block_size_));
    hashes.push_back(hash_block_tokens(parent_hash(request, i), block, request.cache_salt()));
  }
}

bool KvCacheManager::is_swapped(const std::string& request_id) const {
  auto it = tables_.find(request_id);
  return it != tables_.end() && it->second.on_cpu;
}

std::span<const int32_t> KvCacheManager::block_ids(const std::string& request_id) const {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return {};
  return it->second.blocks;
}

ComputedBlocks KvCacheManager::get_computed_blocks(Request& request) {
  ComputedBlocks out;
  if (!gpu_.caching_enabled() || has_blocks(request.request_id())) return out;
  // The last token is never served from the cache: its logits are needed.
  int32_t max_blocks = std::max(0, (request.num_tokens() - 1) / block_size_);
  ensure_hashes(request, max_blocks);
  auto tokens = request.all_token_ids();
  for (int32_t i = 0; i < max_blocks; ++i) {
    auto block = tokens.subspan(size_t(i) * size_t(block_size_), size_t(block_size_));
    auto id = gpu_.lookup(request.block_hashes()[size_t(i)], parent_hash(request, i), block, request.cache_salt());
    if (!id) break;
    out.block_ids.push_back(*id);
  }
  out.num_tokens = int32_t(out.block_ids.size()) * block_size_;
  return out;
}

int32_t KvCacheManager::num_blocks_needed(const Request& request, int32_t num_new_tokens,
                                          const ComputedBlocks* computed, int32_t num_lookahead_tokens) const {
  auto it = tables_.find(request.request_id());
  const std::vector<int32_t> kNone;
  const std::vector<int32_t>& existing = it == tables_.end() ? kNone : it->second.blocks;
  int32_t start = request.num_computed_tokens();
  int32_t num_existing = int32_t(existing.size());
  int32_t needed = 0;
  if (computed != nullptr && !computed->block_ids.empty()) {
    start = computed->num_tokens;
    num_existing += int32_t(computed->block_ids.size());
    for (int32_t id : computed->block_ids)
      if (gpu_.ref_count(id) == 0) ++needed;  // taking back a free cached block uses up a free block
  }
  int32_t total = blocks_for_tokens(start + num_new_tokens + num_lookahead_tokens, block_size_);
  needed += std::max(0, total - num_existing);
  // Existing blocks in the write range that another request shares need a private block.
  for (int32_t i = start / block_size_; i < std::min(int32_t(existing.size()), total); ++i)
    if (gpu_.ref_count(existing[size_t(i)]) > 1) ++needed;
  return needed;
}

std::optional<SlotAllocation> KvCacheManager::allocate_slots(Request& request, int32_t num_new_tokens,
                                                             const ComputedBlocks* computed,
                                                             int32_t num_lookahead_tokens) {
  if (num_new_tokens < 0 || num_lookahead_tokens < 0)
    throw std::logic_error("KvCacheManager::allocate_slots: negative token count");
  auto found = tables_.find(request.request_id());
  if (found != tables_.end() && found->second.on_cpu)
    throw std::logic_error("KvCacheManager::allocate_slots: request " + request.request_id() + " is swapped out");
  bool with_hit = computed != nullptr && !computed->block_ids.empty();
  if (with_hit && found != tables_.end() && !found->second.blocks.empty())
    throw std::logic_error("KvCacheManager::allocate_slots: prefix hit for a request that already has blocks");
  if (num_blocks_needed(request, num_new_tokens, computed, num_lookahead_tokens) > gpu_.num_free_blocks())
    return std::nullopt;

  Table& table = tables_[request.request_id()];
  bool first_allocation = table.blocks.empty();
  int32_t start = request.num_computed_tokens();
  if (with_hit) {
    // The hit must still be valid: nothing may allocate between get_computed_blocks and here.
    for (size_t i = 0; i < computed->block_ids.size(); ++i) {
      auto h = gpu_.block_hash(computed->block_ids[i]);
      if (!h || *h != request.block_hashes()[i])
        throw std::logic_error("KvCacheManager::allocate_slots: stale prefix-cache hit");
    }
    gpu_.touch(computed->block_ids);  // before allocating, so these blocks cannot be evicted
    table.blocks = computed->block_ids;
    table.num_hashed = int32_t(computed->block_ids.size());
    start = computed->num_tokens;
  }
  if (first_allocation && gpu_.caching_enabled() && computed != nullptr) {
    ++stats_.requests;
    stats_.queries += request.num_tokens();
    stats_.hits += with_hit ? computed->num_tokens : 0;
  }

  SlotAllocation out;
  int32_t total = blocks_for_tokens(start + num_new_tokens + num_lookahead_tokens, block_size_);
  for (int32_t i = start / block_size_; i < std::min(int32_t(table.blocks.size()), total); ++i) {
    int32_t old_id = table.blocks[size_t(i)];
    if (gpu_.ref_count(old_id) <= 1) continue;
    int32_t new_id = gpu_.allocate(1)->front();                           // counted in num_blocks_needed
    if (i * block_size_ < start) out.copies.push_back({old_id, new_id});  // holds computed KV: copy it
    gpu_.free(std::span<const int32_t>(&old_id, 1));
    table.blocks[size_t(i)] = new_id;
  }
  int32_t missing = total - int32_t(table.blocks.size());
  if (missing > 0) {
    auto fresh = gpu_.allocate(missing);  // counted in num_blocks_needed
    out.new_block_ids = *fresh;
    table.blocks.insert(table.blocks.end(), fresh->begin(), fresh->end());
  }
  return out;
}

void KvCacheManager::cache_computed_blocks(Request& request) {
  if (!gpu_.caching_enabled()) return;
  auto it = tables_.find(request.request_id());
  if (it == tables_.end() || it->second.on_cpu) return;
  Table& table = it->second;
  int32_t full = std::min({request.num_computed_tokens() / block_size_, int32_t(table.blocks.size()), table.cache_limit});
  if (full <= table.num_hashed) return;
  ensure_hashes(request, full);
  auto tokens = request.all_token_ids();
  for (int32_t i = table.num_hashed; i < full; ++i) {
    auto block = tokens.subspan(size_t(i) * size_t(block_size_), size_t(block_size_));
    gpu_.cache_block(table.blocks[size_t(i)], request.block_hashes()[size_t(i)], parent_hash(request, i), block,
                     request.cache_salt());
  }
  table.num_hashed = full;
}

void KvCacheManager::free(Request& request) {
  auto it = tables_.find(request.request_id());
  if (it == tables_.end()) return;
  cache_computed_blocks(request);
  Table& table = it->second;
  // Reverse order: the tail of a sequence is the least likely to be shared, so it is evicted first.
  std::vector<int32_t> order(table.blocks.rbegin(), table.blocks.rend());
  (table.on_cpu ? cpu_ : gpu_).free(order);
  tables_.erase(it);
}

void KvCacheManager::truncate(Request& request, int32_t num_tokens_to_keep) {
  if (num_tokens_to_keep % block_size_ != 0)
    throw std::logic_error("KvCacheManager::truncate: the kept length must be a multiple of the block size");
  auto it = tables_.find(request.request_id());
  if (it == tables_.end()) return;
  if (it->second.on_cpu) throw std::logic_error("KvCacheManager::truncate: request " + request.request_id() + " is swapped out");
  Table& table = it->second;
  const size_t keep = size_t(num_tokens_to_keep / block_size_);
  if (table.blocks.size() > keep) {
    std::vector<int32_t> order(table.blocks.rbegin(), table.blocks.rend() - std::ptrdiff_t(keep));
    gpu_.free(order);
    table.blocks.resize(keep);
  }
  table.num_hashed = std::min(table.num_hashed, int32_t(keep));
  if (request.block_hashes().size() > keep) request.block_hashes().resize(keep);
}

void KvCacheManager::stop_caching_from(Request& request, int32_t first_block) {
  auto it = tables_.find(request.request_id());
  if (it == tables_.end()) return;
  it->second.cache_limit = std::min(it->second.cache_limit, std::max(first_block, 0));
}

void KvCacheManager::release_unused_blocks(Request& request) {
  auto it = tables_.find(request.request_id());
  if (it == tables_.end() || it->second.on_cpu) return;
  Table& table = it->second;
  const size_t keep = size_t(std::max(blocks_for_tokens(request.num_computed_tokens(), block_size_), table.num_hashed));
  if (table.blocks.size() <= keep) return;
  std::vector<int32_t> order(table.blocks.rbegin(), table.blocks.rend() - std::ptrdiff_t(keep));
  gpu_.free(order);
  table.blocks.resize(keep);
}

void KvCacheManager::remember_sequence(const Request& request) {
  if (max_remembered_ == 0) return;
  auto it = tables_.find(request.request_id());
  if (it == tables_.end() || it->second.on_cpu) return;
  const Table& table = it->second;
  const int32_t n = std::min(request.num_computed_tokens(), int32_t(table.blocks.size()) * block_size_);
  if (n <= 0) return;
  Remembered r;
  auto tokens = request.all_token_ids();
  r.tokens.assign(tokens.begin(), tokens.begin() + n);
  r.blocks.assign(table.blocks.begin(), table.blocks.begin() + blocks_for_tokens(n, block_size_));
  for (int32_t b : r.blocks) r.generations.push_back(gpu_.generation(b));
  r.exact = int32_t(std::min<int64_t>(n, int64_t(table.cache_limit) * block_size_));
  r.cache_salt = request.cache_salt();
  remembered_.push_front(std::move(r));
  while (int32_t(remembered_.size()) > max_remembered_) remembered_.pop_back();
}

int32_t KvCacheManager::num_valid_tokens(const Remembered& r) const {
  size_t b = 0;
  while (b < r.blocks.size() && gpu_.generation(r.blocks[b]) == r.generations[b]) ++b;
  return std::min(int32_t(r.tokens.size()), int32_t(b) * block_size_);
}

std::optional<KvReuse> KvCacheManager::find_reuse(const Request& request, int32_t start) const {
  // The last token is always computed: its logits are needed.
  auto prompt = request.all_token_ids().first(size_t(std::max(request.num_tokens() - 1, 0)));
  std::optional<KvReuse> best;
  for (size_t i = 0; i < remembered_.size(); ++i) {
    const Remembered& r = remembered_[i];
    if (r.cache_salt != request.cache_salt()) continue;
    const auto earlier = std::span<const int32_t>(r.tokens).first(size_t(num_valid_tokens(r)));
    const ReuseMatch m = match_for_reuse(prompt, start, earlier);
    if (m.end <= start || (best && m.end - start <= best->num_tokens())) continue;
    KvReuse u;
    u.start = start;
    u.same_end = m.same_end;
    u.run_src = m.run_src;
    u.end = m.end;
    u.exact_end = std::max(start, m.end == m.same_end && m.same_end <= r.exact ? m.end : std::min(m.same_end, r.exact));
    u.source = int32_t(i);
    best = u;
  }
  return best;
}

std::vector<KvSlotMove> KvCacheManager::reuse_kv(Request& request, const KvReuse& reuse) {
  auto it = tables_.find(request.request_id());
  if (it == tables_.end() || it->second.on_cpu || reuse.source < 0 || size_t(reuse.source) >= remembered_.size())
    throw std::logic_error("KvCacheManager::reuse_kv: no blocks for request " + request.request_id());
  const Table& table = it->second;
  const Remembered& r = remembered_[size_t(reuse.source)];
  if (int64_t(table.blocks.size()) * block_size_ < reuse.end || reuse.end - reuse.same_end + reuse.run_src > int32_t(r.tokens.size()))
    throw std::logic_error("KvCacheManager::reuse_kv: the reuse does not fit the blocks");
  std::vector<KvSlotMove> moves;
  moves.reserve(size_t(reuse.num_tokens()));
  for (int32_t p = reuse.start; p < reuse.end; ++p) {
    const int32_t src = p < reuse.same_end ? p : p - reuse.same_end + reuse.run_src;
    moves.push_back({int64_t(r.blocks[size_t(src / block_size_)]) * block_size_ + src % block_size_,
                     int64_t(table.blocks[size_t(p / block_size_)]) * block_size_ + p % block_size_, src, p});
  }
  if (reuse.exact_end < reuse.end) stop_caching_from(request, reuse.exact_end / block_size_);
  return moves;
}

void KvCacheManager::fork(const Request& parent, const Request& child) {
  auto it = tables_.find(parent.request_id());
  if (it == tables_.end() || it->second.on_cpu)
    throw std::logic_error("KvCacheManager::fork: parent " + parent.request_id() + " has no GPU blocks");
  if (has_blocks(child.request_id()))
    throw std::logic_error("KvCacheManager::fork: child " + child.request_id() + " already has blocks");
  Table copy = it->second;
  gpu_.touch(copy.blocks);
  tables_.emplace(child.request_id(), std::move(copy));
}

bool KvCacheManager::can_swap_out(const Request& request) const {
  auto it = tables_.find(request.request_id());
  if (it == tables_.end() || it->second.on_cpu) return false;
  int32_t keep =
      std::min(blocks_for_tokens(request.num_computed_tokens(), block_size_), int32_t(it->second.blocks.size()));
  return keep <= cpu_.num_free_blocks();
}

std::optional<std::vector<BlockCopy>> KvCacheManager::swap_out(Request& request) {
  if (!can_swap_out(request)) return std::nullopt;
  cache_computed_blocks(request);  // full blocks stay in the GPU prefix cache after the swap
  Table& table = tables_[request.request_id()];
  // Only blocks holding computed KV travel; lookahead blocks beyond them are just released.
  int32_t keep = std::min(blocks_for_tokens(request.num_computed_tokens(), block_size_), int32_t(table.blocks.size()));
  auto cpu_ids = *cpu_.allocate(keep);
  std::vector<BlockCopy> copies;
  for (int32_t i = 0; i < keep; ++i) copies.push_back({table.blocks[size_t(i)], cpu_ids[size_t(i)]});
  std::vector<int32_t> order(table.blocks.rbegin(), table.blocks.rend());
  gpu_.free(order);
  table.blocks = std::move(cpu_ids);
  table.num_hashed = 0;
  table.on_cpu = true;
  return copies;
}

bool KvCacheManager::can_swap_in(const Request& request, int32_t num_new_tokens) const {
  auto it = tables_.find(request.request_id());
  if (it == tables_.end() || !it->second.on_cpu) return false;
  int32_t need = std::max(int32_t(it->second.blocks.size()),
                          blocks_for_tokens(request.num_computed_tokens() + num_new_tokens, block_size_));
  return need <= gpu_.num_free_blocks();
}

std::optional<std::vector<BlockCopy>> KvCacheManager::swap_in(Request& request, int32_t num_new_tokens) {
  if (!can_swap_in(request, num_new_tokens)) return std::nullopt;
  Table& table = tables_[request.request_id()];
  auto gpu_ids = *gpu_.allocate(int32_t(table.blocks.size()));
  std::vector<BlockCopy> copies;
  for (size_t i = 0; i < gpu_ids.size(); ++i) copies.push_back({table.blocks[i], gpu_ids[i]});
  cpu_.free(table.blocks);
  table.blocks = std::move(gpu_ids);
  table.num_hashed = 0;
  table.on_cpu = false;
  return copies;
}

}  // namespace cypris
