#include "engine/runtime/step_messages.h"

#include <cstring>
#include <type_traits>

#include "engine/common/error.h"

namespace cypris {

namespace {

class Writer {
 public:
  template <typename T>
  void scalar(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const char* p = reinterpret_cast<const char*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  template <typename T>
  void array(const std::vector<T>& v) {
    scalar<int64_t>(static_cast<int64_t>(v.size()));
    const char* p = reinterpret_cast<const char*>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<char> out;
};

class Reader {
 public:
  Reader(std::span<const char> bytes, const char* what) : bytes_(bytes), what_(what) {}
  template <typename T>
  T scalar() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename T>
  std::vector<T> array() {
    const int64_t n = scalar<int64_t>();
    CYPRIS_CHECK(n >= 0 && static_cast<uint64_t>(n) <= (bytes_.size() - pos_) / sizeof(T),
                 "{} message: an array of {} elements does not fit in the {} bytes left", what_, n,
                 bytes_.size() - pos_);
    std::vector<T> v(static_cast<size_t>(n));
    if (n > 0) std::memcpy(v.data(), bytes_.data() + pos_, static_cast<size_t>(n) * sizeof(T));
    pos_ += static_cast<size_t>(n) * sizeof(T);
    return v;
  }
  void finish() const {
    CYPRIS_CHECK(pos_ == bytes_.size(), "{} message: {} bytes left over after its fields", what_,
                 bytes_.size() - pos_);
  }

 private:
  void need(size_t n) const {
    CYPRIS_CHECK(bytes_.size() - pos_ >= n, "{} message is truncated ({} bytes)", what_, bytes_.size());
  }
  std::span<const char> bytes_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace

const char* step_message_name(int64_t kind) {
  switch (static_cast<StepMessage>(kind)) {
    case StepMessage::kExecute:
      return "execute";
    case StepMessage::kSwapOut:
      return "swap-out";
    case StepMessage::kSwapIn:
      return "swap-in";
    case StepMessage::kCopyBlocks:
      return "block copy";
    case StepMessage::kAllocateSwap:
      return "allocate swap";
  }
  return kind == 0 ? "stop" : "unknown";
}

std::vector<char> encode_batch(const BatchContext& b) {
  Writer w;
  w.array(b.token_ids);
  w.array(b.positions);
  w.array(b.slot_mapping);
  w.array(b.query_start_loc);
  w.array(b.seq_lens);
  w.array(b.block_tables);
  w.scalar(b.max_blocks_per_seq);
  w.scalar(b.max_query_len);
  w.scalar(b.max_seq_len);
  w.array(b.logits_indices);
  w.array(b.sampled_seqs);
  return std::move(w.out);
}

BatchContext decode_batch(std::span<const char> bytes) {
  Reader r(bytes, "step batch");
  BatchContext b;
  b.token_ids = r.array<int32_t>();
  b.positions = r.array<int32_t>();
  b.slot_mapping = r.array<int64_t>();
  b.query_start_loc = r.array<int32_t>();
  b.seq_lens = r.array<int32_t>();
  b.block_tables = r.array<int32_t>();
  b.max_blocks_per_seq = r.scalar<int32_t>();
  b.max_query_len = r.scalar<int32_t>();
  b.max_seq_len = r.scalar<int32_t>();
  b.logits_indices = r.array<int32_t>();
  b.sampled_seqs = r.array<int32_t>();
  r.finish();
  return b;
}

std::vector<char> encode_block_copies(std::span<const BlockCopy> pairs) {
  Writer w;
  w.scalar<int64_t>(static_cast<int64_t>(pairs.size()));
  for (const auto& p : pairs) {
    w.scalar(p.src);
    w.scalar(p.dst);
  }
  return std::move(w.out);
}

std::vector<BlockCopy> decode_block_copies(std::span<const char> bytes) {
  Reader r(bytes, "block move");
  const int64_t n = r.scalar<int64_t>();
  CYPRIS_CHECK(n >= 0 && static_cast<uint64_t>(n) * 8 == bytes.size() - sizeof(int64_t),
               "block move message: {} pairs in {} bytes", n, bytes.size());
  std::vector<BlockCopy> out(static_cast<size_t>(n));
  for (auto& p : out) {
    p.src = r.scalar<int32_t>();
    p.dst = r.scalar<int32_t>();
  }
  r.finish();
  return out;
}

std::vector<char> encode_int64(int64_t v) {
  Writer w;
  w.scalar(v);
  return std::move(w.out);
}

int64_t decode_int64(std::span<const char> bytes) {
  Reader r(bytes, "swap size");
  const int64_t v = r.scalar<int64_t>();
  r.finish();
  return v;
}

}  // namespace cypris
