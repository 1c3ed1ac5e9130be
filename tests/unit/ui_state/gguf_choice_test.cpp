// The Models panel's GGUF logic: a repo's GGUF files are offered one per model (split parts
// joined) with the quant type from the name and the total size; picking one downloads only its
// files, and the loaded path is the file itself.
#include "app/ui/state/gguf_choice.h"

#include <gtest/gtest.h>

#include "app/ui/state/hub_session.h"
#include "tests/support/fake_services.h"
#include "tests/unit/ui_state/pump.h"

namespace cypris {
namespace {

using fake::FakeServices;
using fake::pump_until;

TEST(GgufChoice, QuantTypeFromTheFileName) {
  EXPECT_EQ(gguf_quant_from_name("Llama-3.2-1B-Instruct-Q4_K_M.gguf"), "Q4_K_M");
  EXPECT_EQ(gguf_quant_from_name("qwen2.5-7b-instruct-q8_0.gguf"), "Q8_0");
  EXPECT_EQ(gguf_quant_from_name("Mistral-7B-Instruct-v0.3.IQ4_XS.gguf"), "IQ4_XS");
  EXPECT_EQ(gguf_quant_from_name("gemma-2-9b-it-IQ2_XXS.gguf"), "IQ2_XXS");
  EXPECT_EQ(gguf_quant_from_name("model-f16.gguf"), "F16");
  EXPECT_EQ(gguf_quant_from_name("model-BF16-00001-of-00002.gguf"), "BF16");
  EXPECT_EQ(gguf_quant_from_name("sub/dir/Q3_K_L/model-Q3_K_L.gguf"), "Q3_K_L");
  EXPECT_EQ(gguf_quant_from_name("ggml-model.gguf"), "");
  EXPECT_EQ(gguf_quant_from_name("Qwen2-7B.gguf"), "");  // "Qwen2" is not a quant type
}

TEST(GgufChoice, SplitPartsJoinAndIncompleteOnesAreLeftOut) {
  const std::vector<HubFile> files = {{"README.md", 10},
                                      {"m-Q8_0.gguf", 800},
                                      {"m-Q4_K_M.gguf", 450},
                                      {"m-F16-00002-of-00002.gguf", 700},
                                      {"m-F16-00001-of-00002.gguf", 900},
                                      {"m-Q2_K-00001-of-00003.gguf", 100},
                                      {"m-Q3_K_S.gguf", -1}};
  const auto c = gguf_choices(files);
  ASSERT_EQ(c.size(), 4u);  // Q2_K misses two parts
  EXPECT_EQ(c[0].quant, "Q4_K_M");
  EXPECT_EQ(c[1].quant, "Q8_0");
  EXPECT_EQ(c[2].quant, "F16");
  EXPECT_EQ(c[2].size, 1600);
  EXPECT_EQ(c[2].parts, 2);
  EXPECT_EQ(c[2].path, "m-F16-00001-of-00002.gguf");
  EXPECT_EQ(c[2].files, (std::vector<std::string>{"m-F16-00001-of-00002.gguf", "m-F16-00002-of-00002.gguf"}));
  EXPECT_EQ(c[3].quant, "Q3_K_S");  // unknown size last
  EXPECT_EQ(c[3].size, -1);
  EXPECT_EQ(default_gguf_choice(c), 0);
  EXPECT_EQ(default_gguf_choice({}), -1);
}

TEST(GgufChoice, HubSessionDownloadsOnlyThePickedFile) {
  FakeServices services;
  UiQueue queue;
  BackgroundJobs jobs;
  double t = 0;
  services.refs["org/m-GGUF"] = {{HubRef::Kind::Branch, "main", "abc"}};
  services.files["org/m-GGUF@main"] = {{"README.md", 100},
                                       {"m-Q8_0.gguf", 800},
                                       {"m-Q4_K_M.gguf", 450},
                                       {"m-F16-00001-of-00002.gguf", 900},
                                       {"m-F16-00002-of-00002.gguf", 700}};
  HubSession hub(services, queue, jobs, [&] { return t += 0.1; });
  fake::JobsStopper stop_jobs{jobs};
  std::string loaded;
  hub.on_downloaded = [&](const std::string& p) { loaded = p; };
  hub.select_repo("org/m-GGUF");
  pump_until(queue, jobs, [&] { return !hub.listing(); });
  ASSERT_EQ(hub.gguf_files().size(), 3u);
  // Q4_K_M is offered first, and only it is chosen.
  EXPECT_EQ(hub.gguf_pick(), 0);
  EXPECT_EQ(hub.chosen(), (std::set<std::string>{"m-Q4_K_M.gguf"}));
  hub.pick_gguf(2);
  EXPECT_EQ(hub.chosen(), (std::set<std::string>{"m-F16-00001-of-00002.gguf", "m-F16-00002-of-00002.gguf"}));
  EXPECT_EQ(hub.chosen_bytes(), 1600);
  hub.download();
  pump_until(queue, jobs, [&] { return !hub.downloading(); });
  EXPECT_EQ(hub.download_error(), "");
  ASSERT_EQ(services.download_calls.size(), 1u);
  EXPECT_EQ(services.download_calls[0],
            (std::vector<std::string>{"m-F16-00001-of-00002.gguf", "m-F16-00002-of-00002.gguf"}));
  EXPECT_EQ(loaded, "/cache/org/m-GGUF/main/m-F16-00001-of-00002.gguf");
  jobs.shutdown();
}

}  // namespace
}  // namespace cypris
