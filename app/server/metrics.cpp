#include "app/server/metrics.h"

#include <fmt/format.h>

namespace cypris::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1) {}

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i]++;
  sum_ += v;
  count_++;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, bounds_[i], cum);
  }
  cum += counts_.back();
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, cum);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, sum_);
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
}

// Bucket bounds as vLLM / Aphrodite use them.
ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}),
      e2e_({1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0}) {}

void ServerMetrics::count_finished(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reason == "stop") {
    finished_stop_++;
  } else if (reason == "length") {
    finished_length_++;
  } else if (reason == "abort") {
    finished_abort_++;
  } else {
    finished_error_++;
  }
}

static std::string escape_label(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

std::string ServerMetrics::render(const EngineStats& s, const std::string& model_name) const {
  const std::string labels = fmt::format("model_name=\"{}\"", escape_label(model_name));
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{}{{{}}} {}\n", name, help, name, name, labels, v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{}{{{}}} {}\n", name, help, name, name, labels, v);
  };
  gauge("aphrodite:num_requests_running", "Number of requests currently running on GPU.", double(s.num_running));
  gauge("aphrodite:num_requests_waiting", "Number of requests waiting to be processed.", double(s.num_waiting));
  gauge("aphrodite:num_requests_swapped", "Number of requests swapped to CPU.", double(s.num_swapped));
  gauge("aphrodite:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", s.kv_cache_usage);
  gauge("aphrodite:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", s.cpu_swap_usage);
  gauge("aphrodite:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", s.prefix_cache_hit_rate);
  counter("aphrodite:prompt_tokens_total", "Number of prefill tokens processed.", double(s.prompt_tokens_total));
  counter("aphrodite:generation_tokens_total", "Number of generation tokens processed.",
          double(s.generation_tokens_total));
  gauge("aphrodite:avg_prompt_throughput_toks_per_s", "Average prefill throughput in tokens/s.", s.prompt_tokens_per_s);
  gauge("aphrodite:avg_generation_throughput_toks_per_s", "Average generation throughput in tokens/s.",
        s.generation_tokens_per_s);
  if (s.spec_decode) {  // Aphrodite's / vLLM's spec-decode metrics, with --speculative-model only
    gauge("aphrodite:spec_decode_draft_acceptance_rate", "Speculative token acceptance rate.",
          s.spec_acceptance_rate());
    gauge("aphrodite:spec_decode_efficiency", "Speculative decoding system efficiency.", s.spec_efficiency());
    counter("aphrodite:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.",
            double(s.spec_accepted_tokens_total));
    counter("aphrodite:spec_decode_num_draft_tokens_total", "Number of draft tokens.",
            double(s.spec_draft_tokens_total));
    counter("aphrodite:spec_decode_num_emitted_tokens_total", "Number of emitted tokens.",
            double(s.spec_emitted_tokens_total));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    out +=
        "# HELP aphrodite:request_success_total Count of finished requests by finish reason.\n"
        "# TYPE aphrodite:request_success_total counter\n";
    out += fmt::format("aphrodite:request_success_total{{{},finished_reason=\"stop\"}} {}\n", labels, finished_stop_);
    out +=
        fmt::format("aphrodite:request_success_total{{{},finished_reason=\"length\"}} {}\n", labels, finished_length_);
    out += fmt::format("aphrodite:request_success_total{{{},finished_reason=\"abort\"}} {}\n", labels, finished_abort_);
    out += fmt::format("aphrodite:request_success_total{{{},finished_reason=\"error\"}} {}\n", labels, finished_error_);
  }
  out +=
      "# HELP aphrodite:time_to_first_token_seconds Histogram of time to first token in seconds.\n"
      "# TYPE aphrodite:time_to_first_token_seconds histogram\n";
  ttft_.render(out, "aphrodite:time_to_first_token_seconds", labels);
  out +=
      "# HELP aphrodite:time_per_output_token_seconds Histogram of time per output token in seconds.\n"
      "# TYPE aphrodite:time_per_output_token_seconds histogram\n";
  itl_.render(out, "aphrodite:time_per_output_token_seconds", labels);
  out +=
      "# HELP aphrodite:e2e_request_latency_seconds Histogram of end to end request latency in seconds.\n"
      "# TYPE aphrodite:e2e_request_latency_seconds histogram\n";
  e2e_.render(out, "aphrodite:e2e_request_latency_seconds", labels);
  return out;
}

void RequestTimer::on_tokens(int64_t n) {
  if (n <= 0 || !m_) return;
  auto now = std::chrono::steady_clock::now();
  double dt = std::chrono::duration<double>(now - last_).count();
  if (first_) {
    m_->observe_ttft(dt);
    first_ = false;
    n -= 1;  // the first token's time is the TTFT; any others in the same delta came with it
    if (n > 0) {
      for (int64_t i = 0; i < n; ++i) m_->observe_itl(0.0);
    }
  } else {
    // Several tokens in one delta (n > 1, speculative decoding): spread the gap over them.
    for (int64_t i = 0; i < n; ++i) m_->observe_itl(dt / double(n));
  }
  last_ = now;
}

void RequestTimer::finish(const std::string& reason) {
  if (finished_ || !m_) return;
  finished_ = true;
  m_->observe_e2e(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  m_->count_finished(reason);
}

}  // namespace cypris::server
