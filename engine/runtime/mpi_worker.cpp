#include "engine/runtime/mpi_worker.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/runtime/model_runner.h"

namespace cypris {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

std::string mpi_config_fingerprint(const ModelConfig& cfg, const ModelRunnerOptions& o) {
  std::string arch;
  for (const auto& a : cfg.architectures) arch += a + ",";
  return fmt::format(
      "cypris {} | {} {} hidden {} ffn {} layers {} heads {}/{} head_dim {} vocab {} ctx {} rope {} eps {} tied {} "
      "dtype {} | weights {} format {} quant {} tp {} pp {} stage layers {} micro-batches {} block {} blocks {} "
      "device {} kv {} fp32gemm {} | max tokens {} seqs {}",
      CYPRIS_VERSION, arch, cfg.model_type, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers,
      cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size, cfg.max_model_len,
      cfg.rope_theta, cfg.rms_norm_eps, cfg.tie_word_embeddings, cfg.torch_dtype, o.load.dtype, o.load.load_format,
      o.load.quantization.value_or("none"), o.parallel.world_size, o.pipeline_stages,
      fmt::join(o.stage_layers, ","), o.micro_batches, o.block_size, o.num_blocks, o.device,
      o.kv_cache_dtype ? dtype_name(*o.kv_cache_dtype) : "auto", o.cuda_fp32_gemm, o.max_num_batched_tokens,
      o.max_num_seqs);
}

void check_mpi_layout(MpiWorld& world, int tp, int pp, const ModelConfig& cfg, const ModelRunnerOptions& options) {
  if (world.size() != tp * pp) {
    world.fail(fmt::format(
        "--distributed-executor-backend mpi: mpirun started {} processes but --tensor-parallel-size {} x "
        "--pipeline-parallel-size {} needs {}: start one process per rank (mpirun -np {}); several ranks per "
        "process are not supported",
        world.size(), tp, pp, tp * pp, tp * pp));
  }
  const std::string text = mpi_config_fingerprint(cfg, options);
  const std::vector<uint64_t> all = world.all_gather(fnv1a(text));
  std::vector<int> differ;
  for (int r = 1; r < world.size(); ++r) {
    if (all[static_cast<size_t>(r)] != all[0]) differ.push_back(r);
  }
  if (differ.empty()) return;
  const std::vector<std::string> hosts = world.host_names();
  std::string who;
  for (int r : differ) who += fmt::format("{}{} (on {})", who.empty() ? "" : ", ", r, hosts[static_cast<size_t>(r)]);
  world.fail(fmt::format(
      "--distributed-executor-backend mpi: process{} {} run{} a different Cypris version, model config or engine "
      "settings than process 0 (on {}); every process must run the same cypris build with the same arguments and "
      "the same model files. This process has: {}",
      differ.size() == 1 ? "" : "es", who, differ.size() == 1 ? "s" : "", hosts[0], text));
}

void send_to_mpi_workers(StepMessage kind, const std::vector<char>& payload) {
  MpiWorld::instance().send_control(static_cast<int64_t>(kind), payload);
}

void serve_mpi_worker(ModelRunner& runner) {
  MpiWorld& world = MpiWorld::instance();
  const int tp = runner.tensor_parallel_size();
  LOG_INFO("MPI process {} of {}: stage {} of {}, tensor-parallel rank {} of {} loaded; serving steps from process 0",
           world.rank(), world.size(), world.rank() / tp, runner.pipeline_parallel_size(), world.rank() % tp, tp);
  int64_t steps = 0;
  for (;;) {
    int64_t kind = -1;
    try {
      ControlMessage m = world.receive_control();
      kind = m.kind;
      switch (m.kind) {
        case kControlStop:
          LOG_INFO("MPI process {}: stopped by process 0 after {} steps", world.rank(), steps);
          world.exit_process(0);
        case static_cast<int64_t>(StepMessage::kExecute):
          runner.execute_step(decode_batch(m.payload));
          ++steps;
          break;
        case static_cast<int64_t>(StepMessage::kSwapOut):
          runner.swap_out(decode_block_copies(m.payload));
          break;
        case static_cast<int64_t>(StepMessage::kSwapIn):
          runner.swap_in(decode_block_copies(m.payload));
          break;
        case static_cast<int64_t>(StepMessage::kCopyBlocks):
          runner.copy_blocks(decode_block_copies(m.payload));
          break;
        case static_cast<int64_t>(StepMessage::kAllocateSwap):
          runner.allocate_swap_space(decode_int64(m.payload));
          break;
        default:
          CYPRIS_FAIL("unknown control message kind {} from process 0", m.kind);
      }
    } catch (const std::exception& e) {
      LOG_ERROR("MPI process {}: {} failed: {}; ending the job", world.rank(), step_message_name(kind), e.what());
      if (world.failed()) world.exit_process(1);  // process 0 is gone or the job is being stopped
      world.abort_job(1);
    }
  }
}

}  // namespace cypris
