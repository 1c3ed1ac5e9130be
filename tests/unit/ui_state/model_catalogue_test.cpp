// The Models panel's catalogue: every entry is a model the engine runs, and every family the
// model registry supports is offered at least once.
#include "app/ui/state/model_catalogue.h"

#include <gtest/gtest.h>

#include <set>

#include "models/registry/registry.h"

namespace cypris {
namespace {

TEST(ModelCatalogue, EntriesAreWellFormedAndUnique) {
  std::set<std::string> repos;
  ASSERT_FALSE(model_catalogue().empty());
  for (const auto& e : model_catalogue()) {
    SCOPED_TRACE(e.repo);
    EXPECT_FALSE(e.family.empty());
    EXPECT_FALSE(e.note.empty());
    EXPECT_NE(e.repo.find('/'), std::string::npos);
    EXPECT_TRUE(repos.insert(e.repo).second) << "listed twice";
    const bool named_gguf = e.repo.size() >= 5 && e.repo.compare(e.repo.size() - 5, 5, "-GGUF") == 0;
    EXPECT_EQ(e.gguf, named_gguf);
  }
}

TEST(ModelCatalogue, EveryArchitectureIsSupported) {
  const auto supported = supported_architectures();
  const std::set<std::string> ok(supported.begin(), supported.end());
  for (const auto& e : model_catalogue()) {
    EXPECT_TRUE(ok.count(e.architecture)) << e.repo << ": " << e.architecture << " is not in models/registry";
  }
}

TEST(ModelCatalogue, EverySupportedFamilyHasAnEntry) {
  // Architectures deliberately without an entry (aliases of one that has one). Empty today:
  // a new registry entry must either get a catalogue entry or be named here.
  const std::set<std::string> left_out = {};
  std::set<std::string> offered;
  for (const auto& e : model_catalogue()) offered.insert(e.architecture);
  for (const auto& a : supported_architectures()) {
    if (left_out.count(a)) continue;
    EXPECT_TRUE(offered.count(a)) << a << " is supported but the catalogue has no model of it";
  }
  for (const auto& a : left_out) EXPECT_FALSE(offered.count(a)) << a << " is left out but has an entry";
}

TEST(ModelCatalogue, SafetensorsAndGgufEntriesAreBothOffered) {
  int gguf = 0;
  for (const auto& e : model_catalogue()) gguf += e.gguf;
  EXPECT_GT(gguf, 0);
  EXPECT_LT(gguf, static_cast<int>(model_catalogue().size()));
}

}  // namespace
}  // namespace cypris
