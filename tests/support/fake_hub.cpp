// Fake Hugging Face Hub (see fake_hub.h). Protocol details follow
// shared/reference/hf-hub-protocol-notes.md; every answer is built from repo.json + objects/.
#include "tests/support/fake_hub.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace fs = std::filesystem;
using nlohmann::json;

namespace cypris::test {
namespace {

std::string digest_hex(const EVP_MD* md, const std::string& prefix, const std::string& data) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, md, nullptr);
  EVP_DigestUpdate(ctx, prefix.data(), prefix.size());
  EVP_DigestUpdate(ctx, data.data(), data.size());
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, out, &len);
  EVP_MD_CTX_free(ctx);
  std::string s;
  static const char* kHex = "0123456789abcdef";
  for (unsigned i = 0; i < len; ++i) {
    s += kHex[out[i] >> 4];
    s += kHex[out[i] & 15];
  }
  return s;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_all(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

std::string pct_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string pct_encode(const std::string& s) {
  std::string out;
  static const char* kHex = "0123456789ABCDEF";
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::vector<std::string> split_path(const std::string& target) {
  std::string path = target.substr(0, target.find('?'));
  std::vector<std::string> segs;
  std::stringstream ss(path);
  std::string seg;
  while (std::getline(ss, seg, '/')) {
    if (!seg.empty()) segs.push_back(pct_decode(seg));
  }
  return segs;
}

void json_error(httplib::Response& res, int status, const std::string& code, const std::string& message) {
  res.status = status;
  if (!code.empty()) res.set_header("X-Error-Code", code);
  res.set_header("X-Error-Message", message);
  res.set_header("X-Request-Id", "Root=1-test");
  res.set_content(json{{"error", message}}.dump(), "application/json");
}

struct Repo {
  std::string id;
  json meta;
  fs::path dir;
};

}  // namespace

std::string fake_sha256_hex(const std::string& data) {
  return digest_hex(EVP_sha256(), "", data);
}

std::string fake_git_blob_sha1(const std::string& data) {
  std::string head = "blob " + std::to_string(data.size());
  head.push_back('\0');
  return digest_hex(EVP_sha1(), head, data);
}

std::vector<std::string> write_fake_repo(const std::string& root, const FakeRepoSpec& spec) {
  fs::path dir = fs::path(root) / spec.id;
  json commits = json::array();
  std::vector<std::string> ids;
  std::string parent;
  for (size_t i = 0; i < spec.commits.size(); ++i) {
    const auto& c = spec.commits[i];
    json files = json::array();
    std::string digest_input = parent + "\n" + c.message;
    for (const auto& f : c.files) {
      std::string object = fake_git_blob_sha1(f.content);
      write_all(dir / "objects" / object, f.content);
      json jf{{"path", f.path}, {"size", f.content.size()}, {"object", object}};
      if (f.lfs) {
        std::string sha = fake_sha256_hex(f.content);
        std::string pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:" + sha + "\nsize " +
                              std::to_string(f.content.size()) + "\n";
        jf["oid"] = fake_git_blob_sha1(pointer);
        jf["lfs"] = {{"oid", sha}, {"size", f.content.size()}, {"pointerSize", pointer.size()}};
      } else {
        jf["oid"] = object;
      }
      digest_input += "\n" + f.path + " " + object;
      files.push_back(jf);
    }
    std::string id = fake_git_blob_sha1(digest_input);  // any stable 40-hex id will do
    ids.push_back(id);
    parent = id;
    commits.push_back({{"id", id},
                       {"message", c.message},
                       {"files", files},
                       {"date", "2025-01-0" + std::to_string(1 + i % 9) + "T00:00:00.000Z"}});
  }
  json branches = json::object(), tags = json::object();
  for (const auto& [name, idx] : spec.branches) branches[name] = ids.at(idx);
  for (const auto& [name, idx] : spec.tags) tags[name] = ids.at(idx);
  json meta{
      {"id", spec.id}, {"gated", spec.gated}, {"access_token", spec.access_token}, {"branches", branches},
      {"tags", tags},  {"commits", commits},  {"downloads", spec.downloads},       {"tags_list", spec.model_tags}};
  write_all(dir / "repo.json", meta.dump(1));
  return ids;
}

struct FakeHub::Impl {
  std::string root;
  httplib::Server hub, cdn;
  std::thread hub_thread, cdn_thread;
  int port = 0, cdn_port = 0;
  bool running = false;
  FakeHubFaults faults;
  std::atomic<size_t> page_size{1000};
  mutable std::mutex log_mu;
  std::vector<FakeRequest> log;
  std::map<std::string, std::string> renames;  // guarded by log_mu

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port); }

  void record(const std::string& server, const httplib::Request& req, const httplib::Response& res) {
    std::lock_guard<std::mutex> lock(log_mu);
    log.push_back({server, req.method, req.target, req.get_header_value("Range"), req.get_header_value("Authorization"),
                   res.status});
  }

  // Looks a repo up from the first one or two path segments; sets `used` to how many it took.
  std::optional<Repo> find_repo(const std::vector<std::string>& segs, size_t from, size_t& used) const {
    for (size_t n : {size_t{2}, size_t{1}}) {
      if (segs.size() < from + n) continue;
      std::string id = n == 2 ? segs[from] + "/" + segs[from + 1] : segs[from];
      if (id.find("..") != std::string::npos) continue;
      fs::path dir = fs::path(root) / id;
      if (fs::is_regular_file(dir / "repo.json")) {
        used = n;
        return Repo{id, json::parse(read_all(dir / "repo.json")), dir};
      }
    }
    return std::nullopt;
  }

  static const json* find_commit(const Repo& r, const std::string& rev) {
    std::string id = rev;
    if (r.meta["branches"].contains(rev))
      id = r.meta["branches"][rev];
    else if (r.meta["tags"].contains(rev))
      id = r.meta["tags"][rev];
    for (const auto& c : r.meta["commits"]) {
      if (c["id"] == id) return &c;
    }
    return nullptr;
  }

  bool consume(std::atomic<int>& counter) {
    int v = counter.load();
    while (v > 0) {
      if (counter.compare_exchange_weak(v, v - 1)) return true;
    }
    return false;
  }

  // Serves a stored object honouring Range and the fault switches; only the asked range is read.
  void serve_body(const httplib::Request& req, httplib::Response& res, const fs::path& object) {
    const size_t total = fs::file_size(object);
    if (consume(faults.rate_limit_count)) {
      res.set_header("Retry-After", "1");
      json_error(res, 429, "", "rate limited");
      return;
    }
    if (consume(faults.server_error_count)) {
      json_error(res, 503, "", "temporarily unavailable");
      return;
    }
    size_t start = 0, end = total == 0 ? 0 : total - 1;
    bool ranged = false;
    std::string range = req.get_header_value("Range");
    if (!range.empty() && !faults.ignore_range.load() && range.rfind("bytes=", 0) == 0) {
      auto dash = range.find('-');
      start = std::stoull(range.substr(6, dash - 6));
      if (dash + 1 < range.size()) end = std::min<size_t>(std::stoull(range.substr(dash + 1)), end);
      if (start >= total && total != 0) {
        res.status = 416;
        res.set_header("Content-Range", "bytes */" + std::to_string(total));
        return;
      }
      ranged = true;
    }
    auto body = std::make_shared<std::string>(total == 0 ? 0 : end - start + 1, '\0');
    {
      std::ifstream f(object, std::ios::binary);
      f.seekg(static_cast<std::streamoff>(start));
      f.read(body->data(), static_cast<std::streamsize>(body->size()));
    }
    if (!body->empty() && (faults.corrupt_always.load() || consume(faults.corrupt_count))) {
      (*body)[body->size() / 2] ^= 0x5a;
    }
    res.status = ranged ? 206 : 200;
    res.set_header("Accept-Ranges", "bytes");
    if (ranged) {
      res.set_header("Content-Range",
                     "bytes " + std::to_string(start) + "-" + std::to_string(end) + "/" + std::to_string(total));
    }
    size_t drop_at = 0;
    if (faults.drop_after_bytes.load() > 0 && static_cast<size_t>(faults.drop_after_bytes.load()) < body->size() &&
        consume(faults.drop_count)) {
      drop_at = static_cast<size_t>(faults.drop_after_bytes.load());
    }
    if (req.method == "HEAD") {
      res.set_content(*body, "application/octet-stream");
      return;
    }
    res.set_content_provider(body->size(), "application/octet-stream",
                             [body, drop_at](size_t offset, size_t length, httplib::DataSink& sink) {
                               if (drop_at > 0) {
                                 if (offset < drop_at) sink.write(body->data() + offset, drop_at - offset);
                                 return false;  // closes the connection mid-body
                               }
                               sink.write(body->data() + offset, length);
                               return true;
                             });
  }

  bool authorized(const Repo& r, const httplib::Request& req, httplib::Response& res) {
    if (!r.meta.value("gated", false)) return true;
    std::string auth = req.get_header_value("Authorization");
    if (auth == "Bearer " + r.meta.value("access_token", std::string()) &&
        !r.meta["access_token"].get<std::string>().empty()) {
      return true;
    }
    if (auth.empty()) {
      json_error(res, 401, "GatedRepo",
                 "Access to model " + r.id +
                     " is restricted. You must have access to it and be authenticated to "
                     "access it. Please log in.");
    } else {
      json_error(res, 403, "GatedRepo",
                 "Access to model " + r.id + " is restricted and you are not in the authorized list. Visit " +
                     endpoint() + "/" + r.id + " to ask for access.");
    }
    return false;
  }

  void handle_resolve(const httplib::Request& req, httplib::Response& res, const Repo& repo, const std::string& rev,
                      const std::string& path, bool via_cache) {
    if (!authorized(repo, req, res)) return;
    const json* commit = find_commit(repo, rev);
    if (!commit) return json_error(res, 404, "RevisionNotFound", "Invalid rev id: " + rev);
    const json* file = nullptr;
    for (const auto& f : (*commit)["files"]) {
      if (f["path"] == path) file = &f;
    }
    std::string commit_id = (*commit)["id"];
    if (!file) {
      res.set_header("X-Repo-Commit", commit_id);
      return json_error(res, 404, "EntryNotFound", "Entry not found");
    }
    res.set_header("X-Repo-Commit", commit_id);
    if (file->contains("lfs")) {
      std::string sha = (*file)["lfs"]["oid"];
      res.status = 302;
      res.set_header("Location", "http://127.0.0.1:" + std::to_string(cdn_port) + "/blob/" + sha +
                                     "?Expires=9999999999&Signature=fake");
      res.set_header("ETag", "\"" + (*file)["oid"].get<std::string>() + "\"");
      res.set_header("X-Linked-Etag", "\"" + sha + "\"");
      res.set_header("X-Linked-Size", std::to_string((*file)["size"].get<size_t>()));
      res.set_content("Found. Redirecting", "text/plain");
      return;
    }
    if (faults.relative_redirect.load() && !via_cache) {
      res.status = 307;
      res.set_header("Location", "/api/resolve-cache/models/" + repo.id + "/" + commit_id + "/" + path + "?etag=%22" +
                                     (*file)["oid"].get<std::string>() + "%22");
      return;
    }
    res.set_header("ETag", "\"" + (*file)["oid"].get<std::string>() + "\"");
    if (req.method == "HEAD") {
      res.status = 200;
      res.set_content(read_all(repo.dir / "objects" / (*file)["object"].get<std::string>()),
                      "application/octet-stream");
      return;
    }
    serve_body(req, res, repo.dir / "objects" / (*file)["object"].get<std::string>());
  }

  static json ref_list(const json& m, const char* kind, const char* prefix) {
    json out = json::array();
    for (auto it = m[kind].begin(); it != m[kind].end(); ++it) {
      out.push_back({{"name", it.key()}, {"ref", std::string(prefix) + it.key()}, {"targetCommit", it.value()}});
    }
    return out;
  }

  void paginate(const httplib::Request& req, httplib::Response& res, const json& all, const std::string& base_path,
                const std::string& base_query) {
    size_t cursor = req.has_param("cursor") ? std::stoull(req.get_param_value("cursor")) : 0;
    size_t n = page_size.load();
    if (req.has_param("limit")) n = std::min<size_t>(n, std::stoull(req.get_param_value("limit")));
    json page = json::array();
    for (size_t i = cursor; i < all.size() && i < cursor + n; ++i) page.push_back(all[i]);
    if (cursor + n < all.size()) {
      res.set_header("Link", "<" + endpoint() + base_path + "?" + base_query + (base_query.empty() ? "" : "&") +
                                 "cursor=" + std::to_string(cursor + n) + ">; rel=\"next\"");
    }
    res.status = 200;
    res.set_content(page.dump(), "application/json");
  }

  void handle_search(const httplib::Request& req, httplib::Response& res) {
    std::string search = req.get_param_value("search"), author = req.get_param_value("author");
    std::transform(search.begin(), search.end(), search.begin(), ::tolower);
    json all = json::array();
    std::vector<fs::path> found;
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
      if (it.depth() > 2) it.disable_recursion_pending();
      if (it->path().filename() == "repo.json") found.push_back(it->path());
    }
    std::sort(found.begin(), found.end());
    for (const auto& p : found) {
      json m = json::parse(read_all(p));
      std::string id = m["id"], lid = id;
      std::transform(lid.begin(), lid.end(), lid.begin(), ::tolower);
      auto slash = id.find('/');
      std::string who = slash == std::string::npos ? "" : id.substr(0, slash);
      if (!search.empty() && lid.find(search) == std::string::npos) continue;
      if (!author.empty() && who != author) continue;
      all.push_back({{"_id", id},
                     {"id", id},
                     {"modelId", id},
                     {"author", who},
                     {"downloads", m["downloads"]},
                     {"likes", 0},
                     {"private", false},
                     {"tags", m["tags_list"]},
                     {"gated", m["gated"].get<bool>() ? json("manual") : json(false)},
                     {"pipeline_tag", "text-generation"},
                     {"lastModified", "2025-01-01T00:00:00.000Z"}});
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const json& a, const json& b) { return a["downloads"] > b["downloads"]; });
    std::string q = "search=" + pct_encode(req.get_param_value("search"));
    if (!author.empty()) q += "&author=" + pct_encode(author);
    paginate(req, res, all, "/api/models", q);
  }

  void handle_api(const httplib::Request& req, httplib::Response& res, const std::vector<std::string>& segs) {
    if (consume(faults.api_malformed_count)) {
      res.status = 200;
      res.set_content(R"({"sha": 123, "siblings": "x", "branches": 5})", "application/json");
      return;
    }
    if (consume(faults.api_rate_limit_count)) {
      res.set_header("Retry-After", "1");
      return json_error(res, 429, "", "rate limited");
    }
    if (segs.size() == 2) return handle_search(req, res);  // /api/models
    size_t used = 0;
    auto repo = find_repo(segs, 2, used);
    if (!repo) return json_error(res, 404, "RepoNotFound", "Repository not found");
    size_t k = 2 + used;  // index of the part after the repo id
    std::string op = k < segs.size() ? segs[k] : "";
    const json& m = repo->meta;
    if (op == "refs") {
      res.status = 200;
      res.set_content(json{{"branches", ref_list(m, "branches", "refs/heads/")},
                           {"converts", json::array()},
                           {"tags", ref_list(m, "tags", "refs/tags/")}}
                          .dump(),
                      "application/json");
      return;
    }
    std::string rev = "main";
    if ((op == "revision" || op == "tree" || op == "commits") && k + 1 < segs.size())
      rev = segs[k + 1];
    else if (op != "" && op != "revision")
      return json_error(res, 404, "", "Not found");
    const json* commit = find_commit(*repo, rev);
    if (!commit) return json_error(res, 404, "RevisionNotFound", "Invalid rev id: " + rev);
    if (op == "" || op == "revision") {
      json siblings = json::array();
      for (const auto& f : (*commit)["files"]) siblings.push_back({{"rfilename", f["path"]}});
      res.status = 200;
      res.set_content(json{{"_id", repo->id},
                           {"id", repo->id},
                           {"sha", (*commit)["id"]},
                           {"private", false},
                           {"gated", m["gated"].get<bool>() ? json("manual") : json(false)},
                           {"disabled", false},
                           {"downloads", m["downloads"]},
                           {"likes", 0},
                           {"tags", m["tags_list"]},
                           {"siblings", siblings},
                           {"lastModified", (*commit)["date"]}}
                          .dump(),
                      "application/json");
      return;
    }
    if (op == "commits") {
      json list = json::array();
      std::string id = (*commit)["id"];
      bool seen = false;
      for (auto it = m["commits"].rbegin(); it != m["commits"].rend(); ++it) {
        seen |= (*it)["id"] == id;
        if (seen)
          list.push_back({{"id", (*it)["id"]}, {"title", (*it)["message"]}, {"message", ""}, {"date", (*it)["date"]}});
      }
      res.status = 200;
      res.set_content(list.dump(), "application/json");
      return;
    }
    // tree/{rev}[/{path}]
    std::string sub = k + 2 < segs.size() ? segs[k + 2] : "";
    for (size_t i = k + 3; i < segs.size(); ++i) sub += "/" + segs[i];
    bool recursive = req.get_param_value("recursive") == "true";
    std::map<std::string, json> entries;  // sorted by path
    std::string prefix = sub.empty() ? "" : sub + "/";
    for (const auto& f : (*commit)["files"]) {
      std::string p = f["path"];
      if (p.rfind(prefix, 0) != 0) continue;
      std::string rest = p.substr(prefix.size());
      // folders on the way
      for (size_t pos = rest.find('/'); pos != std::string::npos; pos = rest.find('/', pos + 1)) {
        std::string d = prefix + rest.substr(0, pos);
        if (!recursive && rest.substr(0, pos).find('/') != std::string::npos) break;
        entries[d] = {{"type", "directory"}, {"oid", fake_git_blob_sha1("tree " + d)}, {"size", 0}, {"path", d}};
        if (!recursive) break;
      }
      if (!recursive && rest.find('/') != std::string::npos) continue;
      json e{{"type", "file"}, {"oid", f["oid"]}, {"size", f["size"]}, {"path", p}};
      if (f.contains("lfs")) e["lfs"] = f["lfs"];
      entries[p] = e;
    }
    json all = json::array();
    for (auto& [p, e] : entries) all.push_back(e);
    std::string path =
        "/api/models/" + repo->id + "/tree/" + pct_encode(rev) + (sub.empty() ? "" : "/" + pct_encode(sub));
    paginate(req, res, all, path, std::string("recursive=") + (recursive ? "true" : "false") + "&expand=false");
  }

  void handle_hub(const httplib::Request& req, httplib::Response& res) {
    const_cast<httplib::Request&>(req).ranges.clear();  // Range is handled here, not by httplib
    {
      std::lock_guard<std::mutex> lock(log_mu);
      for (const auto& [from, to] : renames) {
        for (const std::string& prefix : {"/api/models/" + from + "/", "/" + from + "/resolve/"}) {
          if (req.target.rfind(prefix, 0) == 0) {
            std::string moved = req.target;
            moved.replace(moved.find(from), from.size(), to);
            res.status = 307;
            res.set_header("Location", moved);
            return;
          }
        }
      }
    }
    auto segs = split_path(req.target);
    try {
      if (segs.size() >= 2 && segs[0] == "api" && segs[1] == "models") {
        handle_api(req, res, segs);
      } else if (segs.size() >= 6 && segs[0] == "api" && segs[1] == "resolve-cache" && segs[2] == "models") {
        size_t used = 0;
        auto repo = find_repo(segs, 3, used);
        if (!repo) return json_error(res, 404, "RepoNotFound", "Repository not found");
        size_t k = 3 + used;
        std::string path;
        for (size_t i = k + 1; i < segs.size(); ++i) path += (path.empty() ? "" : "/") + segs[i];
        handle_resolve(req, res, *repo, segs.at(k), path, true);
      } else {
        size_t used = 0;
        auto repo = find_repo(segs, 0, used);
        if (!repo || segs.size() < used + 3 || segs[used] != "resolve") {
          return json_error(res, 404, "RepoNotFound", "Repository not found");
        }
        std::string path;
        for (size_t i = used + 2; i < segs.size(); ++i) path += (path.empty() ? "" : "/") + segs[i];
        handle_resolve(req, res, *repo, segs[used + 1], path, false);
      }
    } catch (const std::exception& e) {
      json_error(res, 500, "", std::string("fake hub error: ") + e.what());
    }
  }

  void handle_cdn(const httplib::Request& req, httplib::Response& res) {
    const_cast<httplib::Request&>(req).ranges.clear();
    auto segs = split_path(req.target);
    if (segs.size() != 2 || segs[0] != "blob") {
      res.status = 404;
      return;
    }
    if (consume(faults.cdn_expired_count)) {
      res.status = 403;
      res.set_content("<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>",
                      "application/xml");
      return;
    }
    // Find the content by sha256 in any repo.
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
      if (it->path().filename() != "repo.json") continue;
      json m = json::parse(read_all(it->path()));
      for (const auto& c : m["commits"]) {
        for (const auto& f : c["files"]) {
          if (f.contains("lfs") && f["lfs"]["oid"] == segs[1]) {
            return serve_body(req, res, it->path().parent_path() / "objects" / f["object"].get<std::string>());
          }
        }
      }
    }
    res.status = 404;
  }
};

FakeHub::FakeHub(std::string root) : impl_(std::make_unique<Impl>()) {
  impl_->root = std::move(root);
}

FakeHub::~FakeHub() {
  stop();
}

void FakeHub::start() {
  auto& d = *impl_;
  if (d.running) return;
  for (auto* svr : {&d.hub, &d.cdn}) {
    svr->new_task_queue = [] { return new httplib::ThreadPool(48); };
    svr->set_keep_alive_timeout(1);
  }
  // Requests are recorded when handled (httplib's logger misses answers whose body was cut off).
  d.hub.Get(".*", [&d](const httplib::Request& req, httplib::Response& res) {
    d.handle_hub(req, res);
    d.record("hub", req, res);
  });
  d.cdn.Get(".*", [&d](const httplib::Request& req, httplib::Response& res) {
    d.handle_cdn(req, res);
    d.record("cdn", req, res);
  });
  d.port = d.hub.bind_to_any_port("127.0.0.1");
  d.cdn_port = d.cdn.bind_to_any_port("127.0.0.1");
  if (d.port <= 0 || d.cdn_port <= 0) throw std::runtime_error("fake hub: cannot bind 127.0.0.1");
  d.hub_thread = std::thread([&d] { d.hub.listen_after_bind(); });
  d.cdn_thread = std::thread([&d] { d.cdn.listen_after_bind(); });
  // The sockets already listen after bind; wait until the accept loops run so stop() is clean.
  while (!d.hub.is_running() || !d.cdn.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  d.running = true;
}

void FakeHub::stop() {
  auto& d = *impl_;
  if (!d.running) return;
  d.hub.stop();
  d.cdn.stop();
  if (d.hub_thread.joinable()) d.hub_thread.join();
  if (d.cdn_thread.joinable()) d.cdn_thread.join();
  d.running = false;
}

std::string FakeHub::endpoint() const {
  return impl_->endpoint();
}
int FakeHub::port() const {
  return impl_->port;
}
int FakeHub::cdn_port() const {
  return impl_->cdn_port;
}
FakeHubFaults& FakeHub::faults() {
  return impl_->faults;
}
void FakeHub::set_page_size(size_t n) {
  impl_->page_size = std::max<size_t>(1, n);
}

void FakeHub::add_rename(const std::string& old_id, const std::string& new_id) {
  std::lock_guard<std::mutex> lock(impl_->log_mu);
  impl_->renames[old_id] = new_id;
}

std::vector<FakeRequest> FakeHub::requests() const {
  std::lock_guard<std::mutex> lock(impl_->log_mu);
  return impl_->log;
}

void FakeHub::clear_requests() {
  std::lock_guard<std::mutex> lock(impl_->log_mu);
  impl_->log.clear();
}

size_t FakeHub::count_requests(const std::function<bool(const FakeRequest&)>& pred) const {
  auto all = requests();
  return static_cast<size_t>(std::count_if(all.begin(), all.end(), pred));
}

}  // namespace cypris::test
