#include "app/server/errors.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

using namespace cypris::server;

TEST(Errors, OpenAiShape) {
  auto j = nlohmann::json::parse(error_body(400, "bad top_p", std::string("top_p")));
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"]["message"], "bad top_p");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "top_p");
  EXPECT_EQ(j["error"]["code"], 400);
}

TEST(Errors, NullParamAndTypes) {
  auto j = nlohmann::json::parse(error_body(401, "Unauthorized"));
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["type"], "authentication_error");
  EXPECT_EQ(error_type_for_status(404), "not_found_error");
  EXPECT_EQ(error_type_for_status(500), "internal_server_error");
}

TEST(Errors, InvalidUtf8DoesNotThrow) {
  std::string msg = "bad \xff byte";
  EXPECT_NO_THROW(nlohmann::json::parse(error_body(400, msg)));
}
