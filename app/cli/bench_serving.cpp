#include "app/cli/bench_serving.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <semaphore>
#include <thread>

#include "app/cli/commands.h"
#include "app/server/sse.h"
#include "engine/common/error.h"

namespace cypris::cli {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

LatencySummary summarize_ms(std::vector<double> v) {
  LatencySummary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  auto pct = [&](double q) {
    const double pos = q / 100.0 * double(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
  };
  s.p50 = pct(50);
  s.p90 = pct(90);
  s.p99 = pct(99);
  return s;
}

namespace {

struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft_ms = 0, e2e_ms = 0;
  std::vector<double> itl_ms;
  int64_t prompt_tokens = 0, output_tokens = 0;
};

std::vector<std::string> load_dataset(const std::string& path) {
  std::ifstream in(path);
  CYPRIS_CHECK(in.good(), "--dataset: cannot read '{}'", path);
  std::vector<std::string> prompts;
  std::string line;
  const bool jsonl = path.size() > 6 && path.substr(path.size() - 6) == ".jsonl";
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (jsonl) {
      json j = json::parse(line, nullptr, false);
      CYPRIS_CHECK(!j.is_discarded() && j.is_object() && j.contains("prompt") && j["prompt"].is_string(),
                   "--dataset {}: line {}: expected a JSON object with a string \"prompt\"", path, lineno);
      prompts.push_back(j["prompt"].get<std::string>());
    } else {
      prompts.push_back(line);
    }
  }
  CYPRIS_CHECK(!prompts.empty(), "--dataset {}: no prompts", path);
  return prompts;
}

std::unique_ptr<httplib::Client> make_client(const BenchServingOptions& o) {
  auto c = std::make_unique<httplib::Client>(o.base_url);
  c->set_connection_timeout(10, 0);
  c->set_read_timeout(600, 0);
  c->enable_server_certificate_verification(false);
  return c;
}

httplib::Headers auth_headers(const BenchServingOptions& o) {
  httplib::Headers h;
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  return h;
}

RequestResult run_one(const BenchServingOptions& o, const json& body) {
  RequestResult r;
  auto client = make_client(o);
  server::SseParser parser;
  httplib::Request req;
  req.method = "POST";
  req.path = o.endpoint;
  req.headers = auth_headers(o);
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  const auto start = Clock::now();
  auto last = start;
  bool first = true;
  std::string error_text;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    for (auto& ev : parser.feed(std::string_view(data, len))) {
      if (ev.data == "[DONE]") continue;
      json j = json::parse(ev.data, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        error_text = j["error"].is_object() ? j["error"].value("message", ev.data) : ev.data;
        continue;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        r.prompt_tokens = j["usage"].value("prompt_tokens", int64_t(0));
        r.output_tokens = j["usage"].value("completion_tokens", int64_t(0));
      }
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const json& c = j["choices"][0];
      std::string text;
      if (c.contains("text") && c["text"].is_string()) text = c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string()) {
        text = c["delta"]["content"].get<std::string>();
      }
      // A chunk counts as output when it carries text, or new tokens without text (a server started
      // with --skip-tokenizer-init detokenizes nothing): any chunk that is neither the chat role
      // chunk nor the final one. Tokens are counted from usage, not from text.
      const bool role_chunk = c.contains("delta") && c["delta"].contains("role");
      const bool final_chunk = c.contains("finish_reason") && !c["finish_reason"].is_null();
      if (text.empty() && (role_chunk || final_chunk)) continue;
      const auto now = Clock::now();
      if (first) {
        r.ttft_ms = std::chrono::duration<double, std::milli>(now - start).count();
        first = false;
      } else {
        r.itl_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
      }
      last = now;
    }
    return true;
  };
  auto res = client->send(req);
  r.e2e_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (!res) {
    r.error = "connection failed: " + httplib::to_string(res.error());
  } else if (res->status != 200) {
    r.error = fmt::format("HTTP {}: {}", res->status, res->body.substr(0, 200));
  } else if (!error_text.empty()) {
    r.error = error_text;
  } else if (first && r.output_tokens == 0) {
    r.error = "no output";
  } else {
    r.ok = true;
  }
  return r;
}

}  // namespace

BenchServingResult bench_serving(const BenchServingOptions& in) {
  BenchServingOptions o = in;
  if (o.base_url.empty()) o.base_url = fmt::format("http://{}:{}", o.host, o.port);
  while (!o.base_url.empty() && o.base_url.back() == '/') o.base_url.pop_back();
  CYPRIS_CHECK(o.num_prompts > 0, "--num-prompts must be >= 1, got {}", o.num_prompts);
  CYPRIS_CHECK(o.input_len > 0 && o.output_len > 0, "--input-len and --output-len must be >= 1");
  CYPRIS_CHECK(o.endpoint == "/v1/completions" || o.endpoint == "/v1/chat/completions",
               "--endpoint must be /v1/completions or /v1/chat/completions, got '{}'", o.endpoint);

  if (o.model.empty()) {
    auto c = make_client(o);
    auto res = c->Get("/v1/models", auth_headers(o));
    CYPRIS_CHECK(res, "cannot reach {}: {}", o.base_url, httplib::to_string(res.error()));
    CYPRIS_CHECK(res->status == 200, "{}/v1/models answered HTTP {}: {}", o.base_url, res->status, res->body);
    json j = json::parse(res->body, nullptr, false);
    CYPRIS_CHECK(!j.is_discarded() && j.contains("data") && !j["data"].empty(), "{}/v1/models lists no model",
                 o.base_url);
    o.model = j["data"][0].value("id", std::string());
  }

  std::mt19937_64 rng(o.seed);
  std::vector<std::string> dataset;
  if (!o.dataset.empty()) dataset = load_dataset(o.dataset);
  const bool chat = o.endpoint == "/v1/chat/completions";
  std::vector<json> bodies;
  for (int i = 0; i < o.num_prompts; ++i) {
    json b = {{"model", o.model},
              {"max_tokens", o.output_len},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}},
              {"ignore_eos", o.ignore_eos},
              {"temperature", 0.0}};
    if (!dataset.empty()) {
      const std::string& p = dataset[size_t(i) % dataset.size()];
      if (chat) {
        b["messages"] = json::array({{{"role", "user"}, {"content", p}}});
      } else {
        b["prompt"] = p;
      }
    } else if (chat) {
      // No tokenizer on the client: random words of roughly one token each.
      std::string text;
      std::uniform_int_distribution<int> letter(0, 25);
      for (int k = 0; k < o.input_len; ++k) {
        text += k ? " " : "";
        for (int c = 0; c < 3; ++c) text += char('a' + letter(rng));
      }
      b["messages"] = json::array({{{"role", "user"}, {"content", text}}});
    } else {
      // Random token ids from a range every real vocabulary has.
      std::uniform_int_distribution<int> tok(100, 9999);
      std::vector<int> ids(static_cast<size_t>(o.input_len));
      for (auto& t : ids) t = tok(rng);
      b["prompt"] = ids;
    }
    bodies.push_back(std::move(b));
  }

  std::vector<RequestResult> results(bodies.size());
  const int limit = o.max_concurrency > 0 ? o.max_concurrency : o.num_prompts;
  std::counting_semaphore<> slots(limit);
  std::exponential_distribution<double> gap(o.request_rate > 0 ? o.request_rate : 1.0);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  auto next_at = start;
  for (size_t i = 0; i < bodies.size(); ++i) {
    if (o.request_rate > 0 && i > 0) {
      next_at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
      std::this_thread::sleep_until(next_at);
    }
    slots.acquire();
    threads.emplace_back([&, i] {
      results[i] = run_one(o, bodies[i]);
      slots.release();
    });
  }
  for (auto& t : threads) t.join();
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();

  BenchServingResult r;
  r.duration_s = duration;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& x : results) {
    if (!x.ok) {
      r.failed++;
      if (r.errors.size() < 5) r.errors.push_back(x.error);
      continue;
    }
    r.completed++;
    r.input_tokens += x.prompt_tokens;
    const int64_t out = x.output_tokens > 0 ? x.output_tokens : int64_t(x.itl_ms.size() + 1);
    r.output_tokens += out;
    ttft.push_back(x.ttft_ms);
    e2e.push_back(x.e2e_ms);
    if (out > 1) tpot.push_back((x.e2e_ms - x.ttft_ms) / double(out - 1));
    itl.insert(itl.end(), x.itl_ms.begin(), x.itl_ms.end());
  }
  r.ttft = summarize_ms(ttft);
  r.tpot = summarize_ms(tpot);
  r.itl = summarize_ms(itl);
  r.e2e = summarize_ms(e2e);
  if (duration > 0) {
    r.request_throughput = r.completed / duration;
    r.output_throughput = double(r.output_tokens) / duration;
    r.total_throughput = double(r.input_tokens + r.output_tokens) / duration;
  }
  return r;
}

std::string format_bench_serving(const BenchServingOptions& o, const BenchServingResult& r) {
  std::string s;
  auto line = [&](const std::string& k, const std::string& v) { s += fmt::format("{:<40}{:>12}\n", k, v); };
  auto num = [](double v) { return fmt::format("{:.2f}", v); };
  auto section = [&](const char* title, const char* key, const LatencySummary& l) {
    s += fmt::format("{:-^52}\n", title);
    line(fmt::format("Mean {} (ms):", key), num(l.mean));
    line(fmt::format("Median {} (ms):", key), num(l.p50));
    line(fmt::format("P90 {} (ms):", key), num(l.p90));
    line(fmt::format("P99 {} (ms):", key), num(l.p99));
  };
  s += fmt::format("{:=^52}\n", " Serving Benchmark Result ");
  line("Endpoint:", o.endpoint);
  line("Successful requests:", std::to_string(r.completed));
  line("Failed requests:", std::to_string(r.failed));
  line("Request rate (req/s):", o.request_rate > 0 ? num(o.request_rate) : "inf");
  line("Max concurrency:", o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : "unlimited");
  line("Benchmark duration (s):", num(r.duration_s));
  line("Total input tokens:", std::to_string(r.input_tokens));
  line("Total generated tokens:", std::to_string(r.output_tokens));
  line("Request throughput (req/s):", num(r.request_throughput));
  line("Output token throughput (tok/s):", num(r.output_throughput));
  line("Total token throughput (tok/s):", num(r.total_throughput));
  section(" Time to First Token ", "TTFT", r.ttft);
  section(" Time per Output Token (excl. 1st token) ", "TPOT", r.tpot);
  section(" Inter-token Latency ", "ITL", r.itl);
  section(" End-to-end Latency ", "E2EL", r.e2e);
  s += std::string(52, '=') + "\n";
  for (const auto& e : r.errors) s += "error: " + e + "\n";
  return s;
}

static const char* kUsage =
    "usage: cypris bench serving [--host H --port P | --base-url URL] [--endpoint /v1/completions]\n"
    "       [--model NAME] [--api-key KEY] [--num-prompts N] [--request-rate R | inf] [--max-concurrency C]\n"
    "       [--input-len N] [--output-len N] [--dataset FILE] [--seed S] [--no-ignore-eos]\n\n"
    "Sends N streaming requests to a running server and reports TTFT, TPOT, inter-token and end-to-end\n"
    "latency (mean, median, p90, p99) and request/token throughput. Random prompts are --input-len random\n"
    "token ids (chat: random words); --dataset reads prompts from a .jsonl file (\"prompt\" field) or one per line.\n";

int run_bench_serving(const std::vector<std::string>& args) {
  BenchServingOptions o;
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> std::string {
        CYPRIS_CHECK(i + 1 < args.size(), "{} needs a value", a);
        return args[++i];
      };
      auto int_value = [&]() -> int {
        const std::string v = value();
        try {
          size_t pos = 0;
          int x = std::stoi(v, &pos);
          CYPRIS_CHECK(pos == v.size(), "");
          return x;
        } catch (const std::exception&) {
          CYPRIS_FAIL("{} must be an integer, got '{}'", a, v);
        }
      };
      if (a == "-h" || a == "--help") {
        std::fputs(kUsage, stdout);
        return 0;
      } else if (a == "--host") {
        o.host = value();
      } else if (a == "--port") {
        o.port = int_value();
      } else if (a == "--base-url") {
        o.base_url = value();
      } else if (a == "--endpoint") {
        o.endpoint = value();
      } else if (a == "--model") {
        o.model = value();
      } else if (a == "--api-key") {
        o.api_key = value();
      } else if (a == "--num-prompts") {
        o.num_prompts = int_value();
      } else if (a == "--request-rate") {
        const std::string v = value();
        if (v == "inf") {
          o.request_rate = 0;
        } else {
          try {
            o.request_rate = std::stod(v);
          } catch (const std::exception&) {
            CYPRIS_FAIL("--request-rate must be a number or 'inf', got '{}'", v);
          }
          CYPRIS_CHECK(o.request_rate > 0, "--request-rate must be > 0 or 'inf', got '{}'", v);
        }
      } else if (a == "--max-concurrency") {
        o.max_concurrency = int_value();
      } else if (a == "--input-len") {
        o.input_len = int_value();
      } else if (a == "--output-len") {
        o.output_len = int_value();
      } else if (a == "--dataset") {
        o.dataset = value();
      } else if (a == "--seed") {
        o.seed = static_cast<uint64_t>(int_value());
      } else if (a == "--no-ignore-eos") {
        o.ignore_eos = false;
      } else {
        CYPRIS_FAIL("unknown option '{}' for 'bench serving' (see --help)", a);
      }
    }
    BenchServingResult r = bench_serving(o);
    std::fputs(format_bench_serving(o, r).c_str(), stdout);
    return r.completed > 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cypris bench serving: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace cypris::cli
