// API keys, admin routes, CORS preflights, --root-path and model load/unload over HTTP.
#include <gtest/gtest.h>

#include "tests/integration/server/server_fixture.h"

using namespace cypris;
using namespace cypris::test;
using nlohmann::json;

namespace {
void with_keys(EngineConfig& c) {
  c.server.api_keys = {"key-one", "key-two"};
  c.server.admin_key = "admin-key";
}
}  // namespace

TEST(Auth, UserRoutesNeedAKey) {
  TestServer s(with_keys);
  const std::string body = R"({"prompt":"a","max_tokens":1})";
  auto r = post_json(s, "/v1/completions", body);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.json["error"]["type"], "authentication_error");
  EXPECT_EQ(post_json(s, "/v1/completions", body, {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(post_json(s, "/v1/completions", body, {{"Authorization", "Bearer key-two"}}).status, 200);
  EXPECT_EQ(post_json(s, "/v1/completions", body, {{"x-api-key", "key-one"}}).status, 200);
  EXPECT_EQ(post_json(s, "/v1/completions", body, {{"Authorization", "Bearer admin-key"}}).status, 200);
  EXPECT_EQ(get(s, "/v1/models").status, 401);
  EXPECT_EQ(get(s, "/v1/models", {{"x-api-key", "key-one"}}).status, 200);  // not an admin route
  // Never protected.
  EXPECT_EQ(get(s, "/health").status, 200);
  EXPECT_EQ(get(s, "/metrics").status, 200);
  EXPECT_EQ(get(s, "/version").status, 200);
  // Kobold routes are protected unless --kobold-no-auth.
  EXPECT_EQ(get(s, "/api/v1/model").status, 401);
  EXPECT_EQ(get(s, "/api/v1/model", {{"x-api-key", "key-one"}}).status, 200);
}

TEST(Auth, KoboldNoAuthLeavesKoboldOpen) {
  TestServer s([](EngineConfig& c) {
    with_keys(c);
    c.server.kobold_no_auth = true;
  });
  EXPECT_EQ(get(s, "/api/v1/model").status, 200);
  EXPECT_EQ(post_json(s, "/api/v1/generate", R"({"prompt":"a","max_length":2})").status, 200);
  EXPECT_EQ(get(s, "/v1/models").status, 401);
}

TEST(Auth, AdminRoutes) {
  TestServer s(with_keys);
  auto c = s.client();
  EXPECT_EQ(to_reply(c.Delete("/v1/model/unload")).status, 401);
  EXPECT_EQ(to_reply(c.Delete("/v1/model/unload", {{"Authorization", "Bearer key-one"}})).status, 403);
  EXPECT_EQ(to_reply(c.Post("/v1/lora/load", {{"x-api-key", "key-one"}}, "{}", "application/json")).status, 403);
  auto lora = to_reply(c.Post("/v1/lora/load", {{"x-api-key", "admin-key"}}, "{}", "application/json"));
  EXPECT_EQ(lora.status, 400);  // past the key check; this server runs without --enable-lora
  EXPECT_NE(lora.json["error"]["message"].get<std::string>().find("--enable-lora"), std::string::npos);
  EXPECT_EQ(to_reply(c.Post("/v1/load_lora_adapter", {{"x-api-key", "key-one"}}, "{}", "application/json")).status,
            403);
  EXPECT_EQ(to_reply(c.Post("/v1/unload_lora_adapter", {{"x-api-key", "key-one"}}, "{}", "application/json")).status,
            403);
}

TEST(Auth, AdminRoutesRefusedWithoutAdminKey) {
  TestServer s([](EngineConfig& c) { c.server.api_keys = {"k"}; });
  auto c = s.client();
  auto r = to_reply(c.Delete("/v1/model/unload", {{"Authorization", "Bearer k"}}));
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(r.body.find("--admin-key"), std::string::npos);
  TestServer open;  // no keys at all: everything else is open, model loading is not
  auto o = open.client();
  EXPECT_EQ(to_reply(o.Delete("/v1/model/unload")).status, 403);
  EXPECT_EQ(to_reply(o.Post("/v1/model/load", "model: x\n", "application/x-yaml")).status, 403);
  EXPECT_EQ(get(open, "/v1/models").status, 200);
}

TEST(ModelSwap, UnloadThenLoadFromYamlAndJson) {
  TestServer s([](EngineConfig& c) { c.server.admin_key = "adm"; });
  httplib::Headers admin = {{"Authorization", "Bearer adm"}};
  auto c = s.client();
  auto r = to_reply(c.Post("/v1/model/load", admin, "model: other/model\n", "application/x-yaml"));
  EXPECT_EQ(r.status, 400);  // one is loaded already
  r = to_reply(c.Delete("/v1/model/unload", admin));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["status"], "success");
  EXPECT_EQ(post_json(s, "/v1/completions", R"({"prompt":"a"})").status, 503);
  r = to_reply(c.Post("/v1/model/load", admin, "model: other/model\nmax_model_len: 300\n", "application/x-yaml"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(s.factory_calls, 1);
  EXPECT_EQ(post_json(s, "/v1/completions", R"({"prompt":"a","max_tokens":2})").status, 200);
  // Bad options are a 400 naming the key.
  ASSERT_EQ(to_reply(c.Delete("/v1/model/unload", admin)).status, 200);
  r = to_reply(c.Post("/v1/model/load", admin, R"({"model":"m","no_such_option":1})", "application/json"));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("no_such_option"), std::string::npos) << r.body;
  r = to_reply(c.Post("/v1/model/load", admin, R"({"model":"m2"})", "application/json"));
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST(Cors, PreflightAlwaysAnsweredEvenWithKeys) {
  TestServer s(with_keys);
  auto c = s.client();
  httplib::Headers h = {{"Origin", "http://localhost:8000"},
                        {"Access-Control-Request-Method", "POST"},
                        {"Access-Control-Request-Headers", "authorization,content-type"}};
  auto r = c.Options("/v1/completions", h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_NE(r->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Headers"), "authorization,content-type");
  // Normal responses carry the origin header too (also errors).
  auto g = c.Get("/v1/models", {{"Origin", "http://localhost:8000"}});
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 401);
  EXPECT_EQ(g->get_header_value("Access-Control-Allow-Origin"), "*");
}

TEST(Cors, ListedOriginsAndCredentials) {
  TestServer s([](EngineConfig& c) {
    c.server.allowed_origins = {"http://good.example"};
    c.server.allowed_methods = {"GET", "POST"};
    c.server.allowed_headers = {"content-type"};
    c.server.allow_credentials = true;
  });
  auto c = s.client();
  auto r = c.Options("/v1/completions", {{"Origin", "http://good.example"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://good.example");
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Credentials"), "true");
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Methods"), "GET, POST");
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Headers"), "content-type");
  auto bad = c.Options("/v1/completions", {{"Origin", "http://evil.example"}});
  ASSERT_TRUE(bad);
  EXPECT_FALSE(bad->has_header("Access-Control-Allow-Origin"));
}

TEST(RootPath, RoutesServedUnderThePrefixToo) {
  TestServer s([](EngineConfig& c) { c.server.root_path = "/llm"; });
  EXPECT_EQ(get(s, "/llm/v1/models").status, 200);
  EXPECT_EQ(get(s, "/v1/models").status, 200);
  EXPECT_EQ(post_json(s, "/llm/v1/completions", R"({"prompt":"a","max_tokens":1})").status, 200);
  EXPECT_EQ(get(s, "/llm/api/v1/model").status, 200);
}
