#include "app/server/auth.h"

#include <gtest/gtest.h>

using namespace cypris::server;

TEST(Auth, ConstantTimeEquals) {
  EXPECT_TRUE(constant_time_equals("secret", "secret"));
  EXPECT_FALSE(constant_time_equals("secret", "secreT"));
  EXPECT_FALSE(constant_time_equals("secret", "secret2"));
  EXPECT_FALSE(constant_time_equals("", "x"));
  EXPECT_TRUE(constant_time_equals("", ""));
}

TEST(Auth, PresentedKeyFromBearerOrXApiKey) {
  EXPECT_EQ(presented_key("Bearer abc", ""), "abc");
  EXPECT_EQ(presented_key("bearer  abc ", ""), "abc");
  EXPECT_EQ(presented_key("", "k2"), "k2");
  EXPECT_EQ(presented_key("Bearer abc", "k2"), "abc");
  EXPECT_EQ(presented_key("Basic Zm9v", ""), std::nullopt);
  EXPECT_EQ(presented_key("", ""), std::nullopt);
}

TEST(Auth, RouteLevels) {
  AuthConfig cfg;
  cfg.api_keys = {"k"};
  EXPECT_EQ(required_auth_level("/v1/completions", cfg), AuthLevel::User);
  EXPECT_EQ(required_auth_level("/v1/models", cfg), AuthLevel::User);  // not an admin route
  EXPECT_EQ(required_auth_level("/v1/model/load", cfg), AuthLevel::Admin);
  EXPECT_EQ(required_auth_level("/v1/lora/load", cfg), AuthLevel::Admin);
  EXPECT_EQ(required_auth_level("/v1/load_lora_adapter", cfg), AuthLevel::Admin);
  EXPECT_EQ(required_auth_level("/v1/unload_lora_adapter", cfg), AuthLevel::Admin);
  EXPECT_EQ(required_auth_level("/v1/load_lora_adapterX", cfg), AuthLevel::User);
  EXPECT_EQ(required_auth_level("/api/v1/generate", cfg), AuthLevel::User);
  EXPECT_EQ(required_auth_level("/health", cfg), AuthLevel::Open);
  EXPECT_EQ(required_auth_level("/metrics", cfg), AuthLevel::Open);
  EXPECT_EQ(required_auth_level("/v1x", cfg), AuthLevel::Open);
  cfg.kobold_no_auth = true;
  EXPECT_EQ(required_auth_level("/api/v1/generate", cfg), AuthLevel::Open);
}

TEST(Auth, Decisions) {
  AuthConfig none;
  EXPECT_EQ(check_auth(AuthLevel::User, std::nullopt, none), AuthResult::Ok);          // no keys: open server
  EXPECT_EQ(check_auth(AuthLevel::Admin, std::nullopt, none), AuthResult::Forbidden);  // but never admin

  AuthConfig cfg;
  cfg.api_keys = {"k1", "k2"};
  cfg.admin_key = "adm";
  EXPECT_EQ(check_auth(AuthLevel::User, std::nullopt, cfg), AuthResult::Unauthorized);
  EXPECT_EQ(check_auth(AuthLevel::User, std::string("bad"), cfg), AuthResult::Unauthorized);
  EXPECT_EQ(check_auth(AuthLevel::User, std::string("k2"), cfg), AuthResult::Ok);
  EXPECT_EQ(check_auth(AuthLevel::User, std::string("adm"), cfg), AuthResult::Ok);
  EXPECT_EQ(check_auth(AuthLevel::Admin, std::string("k1"), cfg), AuthResult::Forbidden);
  EXPECT_EQ(check_auth(AuthLevel::Admin, std::nullopt, cfg), AuthResult::Unauthorized);
  EXPECT_EQ(check_auth(AuthLevel::Admin, std::string("adm"), cfg), AuthResult::Ok);

  AuthConfig keys_only;
  keys_only.api_keys = {"k"};
  EXPECT_EQ(check_auth(AuthLevel::Admin, std::string("k"), keys_only), AuthResult::Forbidden);
}
