// CUDA graphs for decode batches on a CUDA backend (vLLM's CUDAGraphRunner): one graph per capture
// size and query length (1, or 2 .. k + 1 for decodes verifying drafts) over persistent input
// buffers, replayed for batches whose longest sequence has that many new tokens, padded to the size
// (shorter sequences with masked tokens in front, pad_decode_batch). The
// ModelRunner reaches it through DecodeGraphRunner (engine/runtime/decode_graphs.h); the backend is
// used through the Backend interface only (stream, exact allocations, the graphs' pool).
#include "engine/runtime/decode_graphs.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "kernels/cuda/cuda_check.h"
#include "models/model.h"

namespace cypris {
namespace {

// Why the capture is safe: the forward of a decode batch of a fixed size allocates the same
// sizes in the same order each time, so the warm-up run before each capture leaves the blocks the
// capture asks for in the graphs' private pool (a miss would cudaMalloc, which capture allows; the
// graphs' pool never calls cudaFree);
// every kernel takes its launch shape from host values that are fixed per size (num_tokens,
// num_seqs, max_query_len q, and max_seq_len = max_seq_len_to_capture for paged attention's
// split-K); cuBLAS has a preset workspace; nothing downloads (no debug hook, tp 1 only: the
// vocab-parallel paths download ids). The KV cache and the input buffers below never move, so
// their addresses baked into the graphs stay valid.
class CudaDecodeGraphs : public DecodeGraphRunner {
 public:
  CudaDecodeGraphs(Backend& backend, const DecodeGraphPolicy& policy, int block_size)
      : be_(backend), policy_(policy), block_size_(block_size) {
    CYPRIS_CHECK(!policy.sizes.empty() && block_size > 0 && policy.max_seq_len_to_capture > 0,
                 "CUDA graphs: nothing to capture ({} sizes, max_seq_len_to_capture {})", policy.sizes.size(),
                 policy.max_seq_len_to_capture);
    max_size_ = policy.sizes.back();
    width_ = (policy.max_seq_len_to_capture + block_size - 1) / block_size;
    // One byte buffer for all inputs, so that a replay needs one host-to-device copy:
    // slots I64 [tokens], then I32 token ids [tokens], positions [tokens], query starts [seqs + 1],
    // seq lens [seqs], logits indices [tokens], LoRA slots [tokens], block tables [seqs, width].
    const size_t m = static_cast<size_t>(max_size_);
    const size_t t = static_cast<size_t>(std::max(max_size_, max_graph_tokens(policy)));
    off_tokens_ = t * 8;
    off_positions_ = off_tokens_ + t * 4;
    off_qsl_ = off_positions_ + t * 4;
    off_lens_ = off_qsl_ + (m + 1) * 4;
    off_lidx_ = off_lens_ + m * 4;
    off_lora_ = off_lidx_ + t * 4;
    off_tables_ = off_lora_ + t * 4;
    bytes_ = off_tables_ + m * static_cast<size_t>(width_) * 4;
    device_ = be_.empty_exact(DType::U8, {static_cast<int64_t>(bytes_)});
    CUDA_CHECK(cudaMallocHost(&host_, bytes_));
    CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  }

  ~CudaDecodeGraphs() override {
    for (Graph& g : graphs_) {
      if (g.exec) cudaGraphExecDestroy(g.exec);
      if (g.graph) cudaGraphDestroy(g.graph);
    }
    if (copied_) {
      cudaEventSynchronize(copied_);
      cudaEventDestroy(copied_);
    }
    if (host_) cudaFreeHost(host_);
  }

  double capture(Model& model, std::vector<KvCacheLayer>& kv_cache) override {
    const auto t0 = std::chrono::steady_clock::now();
    cudaStream_t stream = static_cast<cudaStream_t>(be_.stream());
    graphs_.clear();
    // Largest first (in tokens): the smaller graphs then fit in the blocks the largest left in the pool.
    std::vector<std::pair<int, int>> shapes;  // (size, q)
    for (int q = 1; q <= policy_.max_query_len; ++q) {
      for (int size : graph_sizes_for(policy_, q)) shapes.emplace_back(size, q);
    }
    std::stable_sort(shapes.begin(), shapes.end(),
                     [](const auto& a, const auto& b) { return a.first * a.second > b.first * b.second; });
    for (const auto& [size, q] : shapes) {
      be_.set_graph_pool(true);
      try {
        stage(nullptr, size, q);
        const ForwardInputs in = inputs(size, q);
        { DeviceTensor warm = model.forward(in, kv_cache); }
        be_.synchronize();
        Graph g;
        g.size = size;
        g.q = q;
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        DeviceTensor logits;
        try {
          logits = model.forward(in, kv_cache);
        } catch (...) {
          cudaGraph_t broken = nullptr;
          cudaStreamEndCapture(stream, &broken);
          if (broken) cudaGraphDestroy(broken);
          cudaGetLastError();
          throw;
        }
        CUDA_CHECK(cudaStreamEndCapture(stream, &g.graph));
        // The logits block goes back to the pool: the next capture may use it, but a replay
        // writes it again and the caller reads it before anything else replays.
        g.logits = logits.view;
        graphs_.push_back(g);  // before instantiating, so that the destructor frees the graph either way
        CUDA_CHECK(cudaGraphInstantiate(&graphs_.back().exec, graphs_.back().graph, 0));
      } catch (...) {
        be_.set_graph_pool(false);
        throw;
      }
      be_.set_graph_pool(false);
    }
    be_.synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  Tensor replay(const BatchContext& b) override {
    CYPRIS_CHECK(is_graph_eligible(b, policy_), "CUDA graphs: the batch of {} sequences and {} tokens cannot replay",
                 b.num_seqs(), b.num_tokens());
    const int q = graph_query_len(b);  // sequences with fewer new tokens are padded to q
    const int size = padded_graph_batch_size(graph_sizes_for(policy_, q), b.num_seqs());
    const auto it =
        std::find_if(graphs_.begin(), graphs_.end(), [&](const Graph& g) { return g.size == size && g.q == q; });
    CYPRIS_CHECK(it != graphs_.end(), "CUDA graphs: no graph of size {} with {} query tokens was captured", size, q);
    stage(&b, size, q);
    CUDA_CHECK(cudaGraphLaunch(it->exec, static_cast<cudaStream_t>(be_.stream())));
    Tensor out = it->logits;
    out.shape = {static_cast<int64_t>(b.logits_indices.size()), it->logits.shape[1]};
    out.strides.clear();
    return out;
  }

  int num_graphs() const override { return static_cast<int>(graphs_.size()); }
  size_t pool_bytes() const override { return be_.graph_pool_bytes(); }

 private:
  struct Graph {
    int size = 0;
    int q = 1;  // query tokens per sequence
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    Tensor logits;  // [size * q, vocab] in the graphs' pool
  };

  template <typename T>
  T* host_at(size_t off) {
    return reinterpret_cast<T*>(static_cast<char*>(host_) + off);
  }
  Tensor device_view(size_t off, DType dtype, std::vector<int64_t> shape) {
    Tensor t(static_cast<char*>(device_.view.data) + off, dtype, std::move(shape), Device::Cuda);
    t.device_index = device_.view.device_index;
    return t;
  }

  // Writes the padded batch (pad_decode_batch; all padding when b is null, for capture) into the
  // pinned staging buffer and queues its copy.
  void stage(const BatchContext* b, int size, int q) {
    const BatchContext none;
    const BatchContext p = pad_decode_batch(b ? *b : none, size, width_, block_size_, q);
    CUDA_CHECK(cudaEventSynchronize(copied_));  // the previous copy has left the staging buffer
    const size_t n = static_cast<size_t>(size);
    const size_t t = n * static_cast<size_t>(q);
    std::memcpy(host_at<int64_t>(0), p.slot_mapping.data(), t * 8);
    std::memcpy(host_at<int32_t>(off_tokens_), p.token_ids.data(), t * 4);
    std::memcpy(host_at<int32_t>(off_positions_), p.positions.data(), t * 4);
    std::memcpy(host_at<int32_t>(off_qsl_), p.query_start_loc.data(), (n + 1) * 4);
    std::memcpy(host_at<int32_t>(off_lens_), p.seq_lens.data(), n * 4);
    std::memcpy(host_at<int32_t>(off_lidx_), p.logits_indices.data(), t * 4);
    if (p.lora_slots.empty()) {
      std::fill_n(host_at<int32_t>(off_lora_), t, -1);  // no adapters in this step: the base model
    } else {
      std::memcpy(host_at<int32_t>(off_lora_), p.lora_slots.data(), t * 4);
    }
    std::memcpy(host_at<int32_t>(off_tables_), p.block_tables.data(), p.block_tables.size() * 4);
    cudaStream_t stream = static_cast<cudaStream_t>(be_.stream());
    // Two copies: the fixed-size prefix, then only the table rows in use.
    CUDA_CHECK(cudaMemcpyAsync(device_.view.data, host_, off_tables_, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(device_.view.data) + off_tables_, host_at<char>(off_tables_),
                               p.block_tables.size() * 4, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(copied_, stream));
  }

  ForwardInputs inputs(int size, int q) {
    ForwardInputs in;
    const int tokens = size * q;
    in.token_ids = device_view(off_tokens_, DType::I32, {tokens});
    in.positions = device_view(off_positions_, DType::I32, {tokens});
    in.logits_indices = device_view(off_lidx_, DType::I32, {tokens});
    in.attn.query_start_loc = device_view(off_qsl_, DType::I32, {size + 1});
    in.attn.seq_lens = device_view(off_lens_, DType::I32, {size});
    in.attn.block_tables = device_view(off_tables_, DType::I32, {size, width_});
    in.attn.slot_mapping = device_view(0, DType::I64, {tokens});
    // Each row's adapter slot, read on the device by the LoRA kernels (ignored without --enable-lora):
    // a replay runs whatever adapters the step's rows name and the slots hold now.
    in.lora_slots = device_view(off_lora_, DType::I32, {tokens});
    in.attn.num_seqs = size;
    in.attn.max_blocks_per_seq = width_;
    in.attn.max_query_len = q;
    in.attn.max_seq_len = static_cast<int>(policy_.max_seq_len_to_capture);
    return in;
  }

  Backend& be_;
  DecodeGraphPolicy policy_;
  int block_size_;
  int max_size_ = 0;
  int64_t width_ = 0;  // block-table entries per row: max_seq_len_to_capture / block_size, rounded up
  size_t off_tokens_ = 0, off_positions_ = 0, off_qsl_ = 0, off_lens_ = 0, off_lidx_ = 0, off_lora_ = 0,
         off_tables_ = 0;
  size_t bytes_ = 0;
  DeviceTensor device_;   // the persistent inputs
  void* host_ = nullptr;  // pinned staging of the same layout
  cudaEvent_t copied_ = nullptr;
  std::vector<Graph> graphs_;  // by tokens, largest first
};

}  // namespace

std::unique_ptr<DecodeGraphRunner> make_decode_graph_runner(Backend& backend, const DecodeGraphPolicy& policy,
                                                            int block_size) {
  if (backend.device() != Device::Cuda || !backend.stream()) return nullptr;
  return std::make_unique<CudaDecodeGraphs>(backend, policy, block_size);
}

}  // namespace cypris
