// Scheduler overhead benchmark: schedule() (with its batch) + update_from_output() per step
// with a fake model, for a full batch of decoding requests (the steady state of a busy server).
// Usage: bench_scheduler [num_requests=1024] [max_num_seqs=256] [prefix_caching=1]
#include "engine/scheduler/scheduler.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <vector>

int main(int argc, char** argv) {
  using namespace cypris;
  const int num_requests = argc > 1 ? std::atoi(argv[1]) : 1024;
  SchedulerConfig c;
  c.max_num_seqs = argc > 2 ? std::atoi(argv[2]) : 256;
  c.enable_prefix_caching = argc > 3 ? std::atoi(argv[3]) != 0 : true;
  c.max_model_len = 4096;
  c.max_num_batched_tokens = 4096;
  c.enable_chunked_prefill = true;
  c.block_size = 16;
  c.num_gpu_blocks = c.max_num_seqs * 1024 / 16;
  Scheduler sched(c);
  std::vector<int32_t> system(256);
  std::iota(system.begin(), system.end(), 1);
  for (int i = 0; i < num_requests; ++i) {
    std::vector<int32_t> prompt = system;  // shared system prompt, then 256 own tokens
    for (int j = 0; j < 256; ++j) prompt.push_back(1000 + i * 256 + j);
    sched.add_request(std::make_shared<Request>("r" + std::to_string(i), prompt, 256));
  }
  int64_t steps = 0, tokens = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (sched.has_unfinished_requests()) {
    SchedulerOutput out = sched.schedule();
    const BatchContext& layout = out.batch;
    std::vector<StepResult> results;
    results.reserve(layout.sampled_seqs.size());
    for (int32_t r : layout.sampled_seqs) {
      const auto& req = *out.scheduled[size_t(r)].request;
      results.push_back({req.request_id(), {int32_t(7 + req.num_tokens() % 1000)}, RequestStatus::Running});
    }
    sched.update_from_output(out, results);
    ++steps;
    tokens += out.total_num_scheduled_tokens;
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto st = sched.stats();
  std::printf("%d requests, max_num_seqs %d, prefix caching %s: %lld steps, %lld tokens, %.1f us/step, "
              "prefix-cache hit rate %.3f\n",
              num_requests, c.max_num_seqs, c.enable_prefix_caching ? "on" : "off", (long long)steps,
              (long long)tokens, 1e6 * s / double(steps), st.prefix_cache_hit_rate);
  return 0;
}
