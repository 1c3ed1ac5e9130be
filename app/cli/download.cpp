// `cypris download REPO [--revision R] [--include GLOB]... [--exclude GLOB]... [--download-dir D]
// [--token T]`: fetches a snapshot into the Hugging Face cache (or D) with a progress display on
// stderr, and prints the snapshot folder on stdout.
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <mutex>

#include "app/cli/commands.h"
#include "engine/hub/hub.h"

namespace cypris::cli {
namespace {

std::atomic<bool> g_cancel{false};

extern "C" void on_sigint(int) {
  g_cancel.store(true);
}

const char* kUsage =
    "usage: cypris download REPO [--revision R] [--include GLOB]... [--exclude GLOB]...\n"
    "                            [--ignore-patterns GLOB]... [--download-dir DIR] [--token TOKEN]\n"
    "Downloads a Hugging Face model repo into the shared cache ($HF_HUB_CACHE, else $HF_HOME/hub, else\n"
    "~/.cache/huggingface/hub) or into DIR, and prints the local folder. Without --include it takes the\n"
    "weights, config and tokenizer files (and skips *.bin/*.pth when *.safetensors exist).\n"
    "Interrupted downloads resume. Environment: HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE.\n";

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", bytes, units[u]);
}

std::string eta(double s) {
  if (s < 0) return "--:--";
  long t = static_cast<long>(s);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{:02}:{:02}", t / 60, t % 60);
}

// Terminal bar when stderr is a TTY, else a plain line every few seconds and per finished file.
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(::isatty(STDERR_FILENO) == 1) {}
  void operator()(const hub::DownloadProgress& p) {
    std::lock_guard<std::mutex> lock(mu_);
    using Ev = hub::DownloadProgress::Event;
    double pct = p.total ? 100.0 * static_cast<double>(p.done) / static_cast<double>(p.total) : 100.0;
    if (tty_) {
      if (p.event == Ev::Verifying && p.file_total >= (256u << 20)) {
        std::fprintf(stderr, "\rverifying %s ...%*s", p.file.c_str(), 40, "");
        std::fflush(stderr);
      } else if (p.event == Ev::Progress || p.event == Ev::FileStarted || p.event == Ev::Finished) {
        const int width = 30;
        int fill = static_cast<int>(pct / 100.0 * width);
        std::string bar(static_cast<size_t>(fill), '#');
        bar.resize(width, ' ');
        std::string name = p.file.size() > 32 ? "..." + p.file.substr(p.file.size() - 29) : p.file;
        std::fprintf(stderr, "\r[%s] %5.1f%% %s/%s %s/s ETA %s  %-32s", bar.c_str(), pct, human(p.done).c_str(),
                     human(p.total).c_str(), human(p.rate).c_str(), eta(p.eta_s).c_str(), name.c_str());
        if (p.event == Ev::Finished) std::fprintf(stderr, "\n");
        std::fflush(stderr);
      }
      return;
    }
    auto now = std::chrono::steady_clock::now();
    if (p.event == Ev::FileFinished || (p.event == Ev::Progress && now - last_ >= std::chrono::seconds(5))) {
      last_ = now;
      std::fprintf(stderr, "download: %zu/%zu files, %s of %s (%.1f%%), %s/s, ETA %s%s%s\n", p.files_done,
                   p.files_total, human(p.done).c_str(), human(p.total).c_str(), pct, human(p.rate).c_str(),
                   eta(p.eta_s).c_str(), p.event == Ev::FileFinished ? ", done: " : "",
                   p.event == Ev::FileFinished ? p.file.c_str() : "");
    }
  }

 private:
  bool tty_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace

int run_download(const Args& args) {
  std::string repo, token;
  hub::DownloadOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> const std::string* {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "cypris download: %s needs a value\n%s", flag, kUsage);
        return nullptr;
      }
      return &args[++i];
    };
    const std::string* v = nullptr;
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--revision") {
      if (!(v = value("--revision"))) return 2;
      opt.revision = *v;
    } else if (a == "--include") {
      if (!(v = value("--include"))) return 2;
      opt.include.push_back(*v);
    } else if (a == "--exclude" || a == "--ignore-patterns") {
      if (!(v = value(a.c_str()))) return 2;
      opt.exclude.push_back(*v);
    } else if (a == "--download-dir" || a == "--local-dir") {
      if (!(v = value(a.c_str()))) return 2;
      opt.download_dir = *v;
    } else if (a == "--token") {
      if (!(v = value("--token"))) return 2;
      token = *v;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "cypris download: unknown option '%s'\n%s", a.c_str(), kUsage);
      return 2;
    } else if (repo.empty()) {
      repo = a;
    } else {
      std::fprintf(stderr, "cypris download: only one repo may be given (got '%s' and '%s')\n", repo.c_str(),
                   a.c_str());
      return 2;
    }
  }
  if (repo.empty()) {
    std::fprintf(stderr, "cypris download: missing REPO\n%s", kUsage);
    return 2;
  }
  ProgressPrinter printer;
  opt.on_progress = [&printer](const hub::DownloadProgress& p) { printer(p); };
  g_cancel = false;
  opt.cancel = &g_cancel;
  auto old_handler = std::signal(SIGINT, on_sigint);
  int rc = 0;
  try {
    hub::HubClient client(hub::settings_from_env(token));
    auto res = client.snapshot_download(repo, opt);
    std::fprintf(stderr, "downloaded %zu files of %s at %s (%s fetched)\n", res.files.size(), repo.c_str(),
                 res.commit.empty() ? opt.revision.c_str() : res.commit.c_str(),
                 human(static_cast<double>(res.bytes_downloaded)).c_str());
    std::fprintf(stdout, "%s\n", res.path.c_str());
    std::fflush(stdout);
  } catch (const hub::HubError& e) {
    std::fprintf(stderr, "\ncypris download: %s\n", e.what());
    if (e.kind() == hub::HubErrorKind::Cancelled) std::fprintf(stderr, "run the same command again to resume\n");
    rc = e.kind() == hub::HubErrorKind::Cancelled ? 130 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\ncypris download: %s\n", e.what());
    rc = 1;
  }
  std::signal(SIGINT, old_handler);
  return rc;
}

}  // namespace cypris::cli
