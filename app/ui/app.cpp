// The desktop app's window, frame loop and layout; see app.h.
#include "app/ui/app.h"

#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "app/ui/app_context.h"
#include "app/ui/panels/chat_panel.h"
#include "app/ui/panels/load_bar.h"
#include "app/ui/panels/logs_panel.h"
#include "app/ui/panels/models_panel.h"
#include "app/ui/panels/options_panel.h"
#include "app/ui/panels/samplers_panel.h"
#include "app/ui/panels/server_panel.h"
#include "app/ui/panels/stats_panel.h"
#include "app/ui/script_runner.h"
#include "app/ui/state/png_writer.h"
#include "app/ui/widgets.h"
#include "engine/common/log.h"

namespace cypris {

namespace {

using Clock = std::chrono::steady_clock;

// Where the shipped resources are: $CYPRIS_RESOURCES, next to the installed binary
// (../share/cypris), or the source tree of a development build.
std::string find_presets_dir() {
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("CYPRIS_RESOURCES")) candidates.emplace_back(env);
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "share" / "cypris");
#ifdef CYPRIS_SOURCE_RESOURCES_DIR
  candidates.emplace_back(CYPRIS_SOURCE_RESOURCES_DIR);
#endif
  for (const auto& c : candidates) {
    if (std::filesystem::is_directory(c / "sampler_presets", ec)) return (c / "sampler_presets").string();
  }
  return {};
}

const char* find_font() {
  static const char* kFonts[] = {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                                 "/usr/share/fonts/TTF/DejaVuSans.ttf", "/usr/share/fonts/dejavu/DejaVuSans.ttf"};
  std::error_code ec;
  for (const char* f : kFonts) {
    if (std::filesystem::exists(f, ec)) return f;
  }
  return nullptr;
}

void glfw_error(int code, const char* description) {
  LOG_WARN("GLFW error {}: {}", code, description);
}

class App {
 public:
  App(const AppLaunch& launch, std::unique_ptr<AppServices> services);
  ~App();
  int run();

 private:
  bool init_window();
  void setup_style_and_font();
  void load_startup_options();
  void draw_frame();
  void save_screenshot(const std::string& path);
  void persist();
  double now() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  AppLaunch launch_;
  Clock::time_point start_ = Clock::now();
  std::unique_ptr<AppServices> services_;
  std::shared_ptr<LogBuffer> log_ = std::make_shared<LogBuffer>(5000);
  std::shared_ptr<LogBufferSink> sink_;
  UiQueue queue_;
  std::string last_job_error_;
  BackgroundJobs jobs_;
  AppSettings settings_;
  OptionsForm options_;
  QuickOptions quick_{options_};
  EngineSession engine_;
  ChatSession chat_;
  LoraSession lora_;
  HubSession hub_;
  ServerSession server_;
  AppContext ctx_;
  std::string status_;
  std::string ini_path_;

  GLFWwindow* window_ = nullptr;
  bool imgui_ready_ = false;
  float scale_ = 1.0f;

  std::unique_ptr<LoadBar> load_bar_;
  std::unique_ptr<ModelsPanel> models_;
  std::unique_ptr<OptionsPanel> options_panel_;
  std::unique_ptr<SamplersPanel> samplers_;
  std::unique_ptr<ServerPanel> server_panel_;
  std::unique_ptr<StatsPanel> stats_;
  std::unique_ptr<LogsPanel> logs_;
  std::unique_ptr<ChatPanel> chat_panel_;
  std::unique_ptr<ScriptRunner> script_;
  std::optional<int> exit_code_;
  int frame_ = 0;
  bool escape_pressed_ = false;  // set by the key callback, consumed once per frame
};

void key_callback(GLFWwindow* window, int key, int, int action, int) {
  // ImGui's GLFW backend chains to this callback (installed before it).
  if (key == GLFW_KEY_ESCAPE && action == GLFW_PRESS) {
    if (auto* flag = static_cast<bool*>(glfwGetWindowUserPointer(window))) *flag = true;
  }
}

App::App(const AppLaunch& launch, std::unique_ptr<AppServices> services)
    : launch_(launch),
      services_(std::move(services)),
      jobs_([this](const std::string& msg) {
        // A worker's uncaught error: log it (the controllers report their own errors in the UI).
        LOG_ERROR("{}", msg);
      }),
      engine_(*services_, queue_, jobs_),
      chat_(*services_, queue_, jobs_, [this] { return now(); }),
      lora_(queue_, jobs_),
      hub_(*services_, queue_, jobs_, [this] { return now(); }),
      server_(*services_, queue_, jobs_) {
  sink_ = std::make_shared<LogBufferSink>(log_);
  add_log_sink(sink_);

  ctx_.services = services_.get();
  ctx_.queue = &queue_;
  ctx_.jobs = &jobs_;
  ctx_.engine = &engine_;
  ctx_.chat = &chat_;
  ctx_.lora = &lora_;
  ctx_.hub = &hub_;
  ctx_.server = &server_;
  ctx_.options = &options_;
  ctx_.quick = &quick_;
  ctx_.log = log_;
  ctx_.settings = &settings_;
  ctx_.config_dir = config_dir();
  ctx_.presets_dir = find_presets_dir();
  ctx_.now_s = [this] { return now(); };
  ctx_.save_settings = [this] {
    try {
      save_settings(settings_path(ctx_.config_dir), settings_);
    } catch (const std::exception& e) {
      status_ = e.what();
    }
  };
  ctx_.set_status = [this](const std::string& s) { status_ = s; };
  ctx_.load_model = [this] {
    const auto& v = options_.validate();
    if (!v.ok) {
      status_ = v.error;
      return;
    }
    LOG_INFO("loading {}", options_.config().model.model);
    engine_.load(options_.config());
  };
  ctx_.use_model = [this](const std::string& path) {
    options_.set_text("model", path);
    options_panel_->request_open(true);
    status_ = "model set to " + path + "; press Load";
  };

  engine_.on_loaded = [this](const EngineSession& e) {
    settings_.last_model = e.loaded_config().model.model;
    persist();
    status_ = "loaded " + e.model_info().model;
    LOG_INFO("model loaded: {}", e.model_info().model);
  };
  engine_.on_unloading = [this] {
    chat_.stop();
    server_.stop();
  };

  try {
    settings_ = load_settings(settings_path(ctx_.config_dir));
  } catch (const std::exception& e) {
    status_ = std::string("settings not read, using defaults: ") + e.what();
    LOG_WARN("{}", status_);
  }
  chat_.transcript().system_prompt = settings_.system_prompt;
  chat_.set_adapter(settings_.chat_lora);
  load_startup_options();

  load_bar_ = std::make_unique<LoadBar>(ctx_);
  models_ = std::make_unique<ModelsPanel>(ctx_);
  options_panel_ = std::make_unique<OptionsPanel>(ctx_);
  samplers_ = std::make_unique<SamplersPanel>(ctx_);
  server_panel_ = std::make_unique<ServerPanel>(ctx_);
  stats_ = std::make_unique<StatsPanel>(ctx_);
  logs_ = std::make_unique<LogsPanel>(ctx_);
  chat_panel_ = std::make_unique<ChatPanel>(ctx_);
  samplers_->apply_saved_preset();
}

App::~App() {
  // Stop the workers before the controllers they post to go away.
  engine_.cancel_load();
  hub_.cancel_download();
  chat_.stop();
  jobs_.shutdown();
  try {
    if (services_->server_running()) services_->stop_server();
  } catch (const std::exception& e) {
    LOG_WARN("stopping the API server: {}", e.what());
  }
  remove_log_sink(sink_);
  if (imgui_ready_) {
    ImGui_ImplOpenGL3_Shutdown();
    ImGui_ImplGlfw_Shutdown();
    ImGui::DestroyContext();
  }
  if (window_) glfwDestroyWindow(window_);
  glfwTerminate();
}

// Options: the last session's (last_options.json), then what the command line set on top; with
// neither, the last model loaded.
void App::load_startup_options() {
  EngineConfig cfg;
  const std::string last = last_options_path(ctx_.config_dir);
  std::error_code ec;
  if (std::filesystem::exists(last, ec)) {
    try {
      load_options_file(last, cfg);
    } catch (const std::exception& e) {
      cfg = EngineConfig{};
      LOG_WARN("previous options not restored: {}", e.what());
    }
  }
  if (cfg.model.model.empty()) cfg.model.model = settings_.last_model;
  for (const auto& key : launch_.explicit_keys) {
    const OptionSpec* s = find_option(key);
    if (s) s->binding.set(cfg, s->binding.get(launch_.cfg));
  }
  cfg.app = EngineConfig{}.app;
  options_.replace(cfg);
}

void App::persist() {
  ctx_.save_settings();
  try {
    std::filesystem::create_directories(ctx_.config_dir);
    save_options_file(last_options_path(ctx_.config_dir), options_.config());
  } catch (const std::exception& e) {
    LOG_WARN("options not saved: {}", e.what());
  }
}

bool App::init_window() {
  glfwSetErrorCallback(glfw_error);
  if (!glfwInit()) {
    std::fprintf(stderr,
                 "cypris: error: cannot open a window (no display?). Run `cypris --no-ui --model MODEL` for the "
                 "headless server.\n");
    return false;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GLFW_TRUE);
  glfwWindowHint(GLFW_SCALE_TO_MONITOR, GLFW_TRUE);
  window_ = glfwCreateWindow(static_cast<int>(settings_.window_width), static_cast<int>(settings_.window_height),
                             "Cypris", nullptr, nullptr);
  if (!window_) {
    std::fprintf(stderr,
                 "cypris: error: cannot create an OpenGL 3.3 window. Run `cypris --no-ui` for the "
                 "headless server.\n");
    return false;
  }
  glfwMakeContextCurrent(window_);
  glfwSwapInterval(1);
  queue_.set_wake([] { glfwPostEmptyEvent(); });
  glfwSetWindowUserPointer(window_, &escape_pressed_);
  glfwSetKeyCallback(window_, key_callback);
  ctx_.window = window_;

  float xs = 1.0f, ys = 1.0f;
  glfwGetWindowContentScale(window_, &xs, &ys);
  scale_ = std::max(1.0f, std::max(xs, ys));
  ctx_.scale = scale_;
  LOG_INFO("display scale {:.2f} (content scale {:.2f} x {:.2f})", scale_, xs, ys);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  std::error_code ec;
  std::filesystem::create_directories(ctx_.config_dir, ec);
  ini_path_ = (std::filesystem::path(ctx_.config_dir) / "imgui.ini").string();
  io.IniFilename = ec ? nullptr : ini_path_.c_str();
  setup_style_and_font();
  ImGui_ImplGlfw_InitForOpenGL(window_, true);
  ImGui_ImplOpenGL3_Init("#version 150");
  imgui_ready_ = true;
  return true;
}

void App::setup_style_and_font() {
  ImGuiIO& io = ImGui::GetIO();
  ImGui::StyleColorsDark();
  ImGuiStyle& style = ImGui::GetStyle();
  style.WindowRounding = 0.0f;
  style.FrameRounding = 3.0f;
  style.GrabRounding = 3.0f;
  style.ScaleAllSizes(scale_);
  const float size = static_cast<float>(settings_.font_size) * scale_;
  if (const char* font = find_font()) {
    // Latin, Greek, Cyrillic, general punctuation and arrows: what chat text and messages use.
    static ImVector<ImWchar> ranges;
    ImFontGlyphRangesBuilder builder;
    builder.AddRanges(io.Fonts->GetGlyphRangesDefault());
    builder.AddRanges(io.Fonts->GetGlyphRangesCyrillic());
    static const ImWchar kExtra[] = {0x0100, 0x024F, 0x0370, 0x03FF, 0x2000, 0x206F, 0x2190, 0x21FF, 0x2500, 0x259F, 0};
    builder.AddRanges(kExtra);
    builder.BuildRanges(&ranges);
    if (io.Fonts->AddFontFromFileTTF(font, size, nullptr, ranges.Data)) return;
  }
  ImFontConfig cfg;
  cfg.SizePixels = 13.0f * scale_;
  io.Fonts->AddFontDefault(&cfg);
}

void App::draw_frame() {
  ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(io.DisplaySize);
  ImGui::Begin("Cypris", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize |
                   ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBringToFrontOnFocus);
  load_bar_->draw();
  ImGui::Separator();
  const float status_h = ImGui::GetFrameHeightWithSpacing();
  const float left_w = std::max(ImGui::GetFontSize() * 26.0f, ImGui::GetContentRegionAvail().x * 0.46f);
  ImGui::BeginChild("sidebar", ImVec2(left_w, -status_h), true);
  models_->draw();
  options_panel_->draw();
  samplers_->draw();
  server_panel_->draw();
  stats_->draw();
  logs_->draw();
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("chat", ImVec2(0, -status_h), true);
  chat_panel_->draw();
  ImGui::EndChild();
  chat_panel_->handle_shortcuts(escape_pressed_);
  escape_pressed_ = false;
  if (status_.empty()) {
    ImGui::TextDisabled("Cypris %s   config: %s", CYPRIS_VERSION, ctx_.config_dir.c_str());
  } else {
    ImGui::TextDisabled("%s", status_.c_str());
  }
  ImGui::End();
}

void App::save_screenshot(const std::string& path) {
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, px.data());
  // OpenGL's rows run bottom-up; PNG's top-down. The window has no transparency.
  std::vector<uint8_t> flipped(px.size());
  const size_t row = static_cast<size_t>(w) * 4;
  for (int y = 0; y < h; ++y) std::copy_n(&px[row * (h - 1 - y)], row, &flipped[row * y]);
  for (size_t i = 3; i < flipped.size(); i += 4) flipped[i] = 255;
  try {
    write_png_rgba(path, flipped.data(), w, h);
    LOG_INFO("screenshot saved: {} ({}x{})", path, w, h);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cypris: %s\n", e.what());
    exit_code_ = 1;
  }
}

int App::run() {
  if (!launch_.ui_script.empty()) {
    try {
      script_ = std::make_unique<ScriptRunner>(ctx_, load_ui_script(launch_.ui_script),
                                               std::vector<Panel*>{models_.get(), options_panel_.get(), samplers_.get(),
                                                                   server_panel_.get(), stats_.get(), logs_.get()},
                                               *chat_panel_, *server_panel_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cypris: error: %s\n", e.what());
      return 2;
    }
  }
  if (!init_window()) return 1;
  LOG_INFO("Cypris desktop app started (config folder {})", ctx_.config_dir);

  while (!glfwWindowShouldClose(window_) && !exit_code_) {
    const bool busy = script_ || !launch_.screenshot.empty() || engine_.status() == EngineSession::Status::Loading ||
                      chat_.transcript().generating() || hub_.downloading() || frame_ < 3;
    if (script_) {
      glfwPollEvents();
    } else {
      // Sleep until input or a worker posts (UiQueue wakes us); redraw at least now and then
      // while something is moving.
      glfwWaitEventsTimeout(busy ? 1.0 / 60.0 : (engine_.loaded() ? 0.5 : 1.0));
    }
    queue_.drain();
    engine_.poll_stats(now(), 1.0);
    server_.poll();

    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::NewFrame();
    std::optional<std::string> shot;
    if (script_) {
      if (auto code = script_->step(now())) {
        exit_code_ = code;
        if (!launch_.screenshot.empty()) shot = launch_.screenshot;  // --screenshot: the last frame
      }
      if (auto s = script_->take_screenshot_request()) shot = s;
    }
    draw_frame();
    ImGui::Render();
    int w = 0, h = 0;
    glfwGetFramebufferSize(window_, &w, &h);
    glViewport(0, 0, w, h);
    glClearColor(0.08f, 0.08f, 0.1f, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    ++frame_;
    if (!launch_.screenshot.empty() && !script_ && frame_ == 4) {
      // --screenshot alone: the first frames (layout settles over the first two), then quit.
      shot = launch_.screenshot;
      exit_code_ = 0;
    }
    if (shot) save_screenshot(*shot);
    glfwSwapBuffers(window_);
  }
  settings_.system_prompt = chat_.transcript().system_prompt;
  settings_.chat_lora = chat_.adapter();
  int ww = 0, wh = 0;
  glfwGetWindowSize(window_, &ww, &wh);
  if (ww > 0 && wh > 0 && !script_ && launch_.screenshot.empty()) {
    settings_.window_width = static_cast<int64_t>(ww / scale_);
    settings_.window_height = static_cast<int64_t>(wh / scale_);
  }
  persist();
  return exit_code_.value_or(0);
}

}  // namespace

int run_desktop_app(const AppLaunch& launch, std::unique_ptr<AppServices> services) {
  App app(launch, std::move(services));
  return app.run();
}

}  // namespace cypris
