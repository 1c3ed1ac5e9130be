// The zip directory reader and the restricted unpickler behind TorchFile (torch_checkpoint.h).
#include "engine/loader/torch_checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "engine/common/error.h"
#include "engine/loader/checkpoint_shards.h"

namespace cypris {
namespace {

// ---- zip (stored entries only, zip64 aware) ----------------------------------------------------

struct ZipEntry {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

uint64_t rd(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::map<std::string, ZipEntry> read_zip(const uint8_t* base, uint64_t size, const std::string& file) {
  auto need = [&](uint64_t off, uint64_t len, const char* what) {
    CYPRIS_CHECK(off <= size && len <= size - off, "{}: truncated or corrupt zip archive ({} at byte {})", file, what,
                 off);
  };
  // End of central directory: 22 bytes plus a comment of up to 65535 bytes, at the end.
  CYPRIS_CHECK(size >= 22, "{}: not a PyTorch checkpoint (too short for a zip archive)", file);
  uint64_t eocd = UINT64_MAX;
  const uint64_t lowest = size > 22 + 65535 ? size - 22 - 65535 : 0;
  for (uint64_t p = size - 22 + 1; p-- > lowest;) {
    if (rd(base + p, 4) == 0x06054b50) {
      eocd = p;
      break;
    }
  }
  CYPRIS_CHECK(eocd != UINT64_MAX,
               "{}: not a zip archive; only the zip format of torch.save (PyTorch 1.6 and later) is read, not the "
               "legacy pickle format (re-save it with a current PyTorch, or use safetensors)",
               file);
  uint64_t count = rd(base + eocd + 10, 2), cd_size = rd(base + eocd + 12, 4), cd_off = rd(base + eocd + 16, 4);
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {
    CYPRIS_CHECK(eocd >= 20 && rd(base + eocd - 20, 4) == 0x07064b50, "{}: zip64 locator missing", file);
    const uint64_t rec = rd(base + eocd - 20 + 8, 8);
    need(rec, 56, "zip64 end of central directory");
    CYPRIS_CHECK(rd(base + rec, 4) == 0x06064b50, "{}: bad zip64 end of central directory", file);
    count = rd(base + rec + 32, 8);
    cd_size = rd(base + rec + 40, 8);
    cd_off = rd(base + rec + 48, 8);
  }
  need(cd_off, cd_size, "central directory");
  CYPRIS_CHECK(count <= cd_size / 46, "{}: the zip directory claims {} entries in {} bytes", file, count, cd_size);
  std::map<std::string, ZipEntry> out;
  uint64_t p = cd_off;
  for (uint64_t i = 0; i < count; ++i) {
    need(p, 46, "central directory entry");
    CYPRIS_CHECK(rd(base + p, 4) == 0x02014b50, "{}: bad zip central directory entry {}", file, i);
    const uint64_t method = rd(base + p + 10, 2);
    uint64_t csize = rd(base + p + 20, 4), usize = rd(base + p + 24, 4);
    const uint64_t name_len = rd(base + p + 28, 2), extra_len = rd(base + p + 30, 2),
                   comment_len = rd(base + p + 32, 2);
    uint64_t local = rd(base + p + 42, 4);
    need(p + 46, name_len + extra_len + comment_len, "central directory entry");
    const std::string name(reinterpret_cast<const char*>(base + p + 46), name_len);
    // Zip64 extra field: the 8-byte values of the fields that read 0xFFFFFFFF, in this order.
    const uint8_t* ex = base + p + 46 + name_len;
    for (uint64_t e = 0; e + 4 <= extra_len;) {
      const uint64_t id = rd(ex + e, 2), len = rd(ex + e + 2, 2);
      CYPRIS_CHECK(e + 4 + len <= extra_len, "{}: zip entry '{}': bad extra field", file, name);
      if (id == 0x0001) {
        uint64_t q = e + 4;
        auto take = [&](uint64_t& v) {
          if (v != 0xFFFFFFFF) return;
          CYPRIS_CHECK(q + 8 <= e + 4 + len, "{}: zip entry '{}': short zip64 field", file, name);
          v = rd(ex + q, 8);
          q += 8;
        };
        take(usize);
        take(csize);
        take(local);
      }
      e += 4 + len;
    }
    CYPRIS_CHECK(method == 0 && csize == usize,
                 "{}: zip entry '{}' is compressed (method {}); torch.save stores entries uncompressed", file, name,
                 method);
    need(local, 30, "local header");
    CYPRIS_CHECK(rd(base + local, 4) == 0x04034b50, "{}: zip entry '{}': bad local header", file, name);
    const uint64_t data = local + 30 + rd(base + local + 26, 2) + rd(base + local + 28, 2);
    need(data, usize, "entry data");
    out[name] = ZipEntry{base + data, usize};
    p += 46 + name_len + extra_len + comment_len;
  }
  return out;
}

// ---- the restricted unpickler -------------------------------------------------------------------

enum class Kind { None, Bool, Int, Float, Str, Tuple, List, Dict, Global, Storage, Tensor, Mark };

struct Value;
using Ptr = std::shared_ptr<Value>;
struct Value {
  Kind kind = Kind::None;
  int64_t i = 0;  // Bool, Int; Storage: numel; Tensor: storage offset
  double f = 0;
  std::string s;             // Str; Global: "module.name"; Storage: key
  std::string storage_type;  // Storage: "FloatStorage", ...
  std::vector<Ptr> items;    // Tuple, List; Tensor: {storage}
  std::vector<std::pair<Ptr, Ptr>> dict;
  std::vector<int64_t> size, stride;  // Tensor
  int depth = 1;                      // nesting: bounded, so that freeing a hostile nest cannot overflow the stack
  bool adopted = false;               // inside a container: no longer modified (keeps depth true, forbids cycles)
};

// A state dict nests a few levels (dict -> tensor -> storage); hostile pickles may nest millions.
constexpr int kMaxDepth = 64;

Ptr make(Kind k) {
  auto v = std::make_shared<Value>();
  v->kind = k;
  return v;
}

const char* const kStorageTypes[] = {"FloatStorage", "HalfStorage",  "BFloat16Storage", "DoubleStorage", "LongStorage",
                                     "IntStorage",   "ShortStorage", "CharStorage",     "ByteStorage",   "BoolStorage"};

bool allowed_global(const std::string& module, const std::string& name) {
  if (module == "collections" && name == "OrderedDict") return true;
  if (module == "torch._utils" && (name == "_rebuild_tensor_v2" || name == "_rebuild_parameter")) return true;
  if (module == "torch") {
    for (const char* t : kStorageTypes) {
      if (name == t) return true;
    }
  }
  return false;
}

class Unpickler {
 public:
  Unpickler(const uint8_t* p, uint64_t n, std::string where) : p_(p), end_(p + n), where_(std::move(where)) {}

  Ptr run() {
    while (true) {
      const uint8_t op = byte();
      switch (op) {
        case 0x80:
          byte();
          break;  // PROTO
        case 0x95:
          take(8);
          break;   // FRAME
        case '.':  // STOP
          CYPRIS_CHECK(!stack_.empty(), "{}: empty pickle", where_);
          return pop();
        case '(':
          push(make(Kind::Mark));
          break;
        case 'N':
          push(make(Kind::None));
          break;
        case 0x88:
        case 0x89: {
          Ptr v = make(Kind::Bool);
          v->i = op == 0x88;
          push(v);
          break;
        }
        case 'J':
          push_int(static_cast<int32_t>(rd(take(4), 4)));
          break;
        case 'K':
          push_int(byte());
          break;
        case 'M':
          push_int(static_cast<int64_t>(rd(take(2), 2)));
          break;
        case 0x8a: {  // LONG1: little-endian two's complement of n bytes
          const uint8_t n = byte();
          CYPRIS_CHECK(n <= 8, "{}: integer of {} bytes is too large", where_, n);
          const uint8_t* b = take(n);
          int64_t v = 0;
          if (n > 0) {
            uint64_t u = rd(b, n);
            if (n < 8 && (b[n - 1] & 0x80)) u |= ~uint64_t{0} << (8 * n);
            v = static_cast<int64_t>(u);
          }
          push_int(v);
          break;
        }
        case 'G': {  // BINFLOAT: big-endian double
          const uint8_t* b = take(8);
          uint64_t u = 0;
          for (int k = 0; k < 8; ++k) u = (u << 8) | b[k];
          Ptr v = make(Kind::Float);
          std::memcpy(&v->f, &u, 8);
          push(v);
          break;
        }
        case 'X':
          push_str(rd(take(4), 4));
          break;  // BINUNICODE
        case 0x8c:
          push_str(byte());
          break;  // SHORT_BINUNICODE
        case 0x8d:
          push_str(rd(take(8), 8));
          break;  // BINUNICODE8
        case 'T':
          push_str(rd(take(4), 4));
          break;  // BINSTRING
        case 'U':
          push_str(byte());
          break;  // SHORT_BINSTRING
        case 'B':
          push_str(rd(take(4), 4));
          break;  // BINBYTES
        case 'C':
          push_str(byte());
          break;  // SHORT_BINBYTES
        case '}':
          push(make(Kind::Dict));
          break;
        case ']':
          push(make(Kind::List));
          break;
        case ')':
          push(make(Kind::Tuple));
          break;
        case 't':
          push(container(Kind::Tuple, pop_mark()));
          break;
        case 0x85:
        case 0x86:
        case 0x87: {
          const size_t n = op - 0x84;
          CYPRIS_CHECK(stack_.size() >= n, "{}: malformed pickle (tuple of {} on a short stack)", where_, n);
          std::vector<Ptr> items(stack_.end() - static_cast<ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(container(Kind::Tuple, std::move(items)));
          break;
        }
        case 'q':
          memo_[byte()] = top();
          break;
        case 'r':
          memo_[static_cast<uint32_t>(rd(take(4), 4))] = top();
          break;
        case 0x94:
          memo_[static_cast<uint32_t>(memo_.size())] = top();
          break;  // MEMOIZE
        case 'h':
          push(memo_get(byte()));
          break;
        case 'j':
          push(memo_get(static_cast<uint32_t>(rd(take(4), 4))));
          break;
        case 'c': {  // GLOBAL "module\nname\n"
          const std::string module = line(), name = line();
          push(global(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          Ptr name = pop(), module = pop();
          CYPRIS_CHECK(name->kind == Kind::Str && module->kind == Kind::Str, "{}: malformed STACK_GLOBAL", where_);
          push(global(module->s, name->s));
          break;
        }
        case 'Q':
          push(persistent(pop()));
          break;     // BINPERSID
        case 'R': {  // REDUCE
          Ptr args = pop(), fn = pop();
          push(call(fn, args));
          break;
        }
        case 'b': {  // BUILD: the state of an OrderedDict (_metadata) or a tensor; not needed
          pop();
          CYPRIS_CHECK(!stack_.empty() && (top()->kind == Kind::Dict || top()->kind == Kind::Tensor),
                       "{}: refuses to set the state of an object (BUILD): only tensors and dicts are read", where_);
          break;
        }
        case 's': {
          Ptr v = pop(), k = pop();
          Ptr d = dict_top();
          adopt(*d, k);
          adopt(*d, v);
          d->dict.emplace_back(k, v);
          break;
        }
        case 'u': {
          std::vector<Ptr> kv = pop_mark();
          CYPRIS_CHECK(kv.size() % 2 == 0, "{}: malformed SETITEMS", where_);
          Ptr d = dict_top();
          for (size_t k = 0; k < kv.size(); k += 2) {
            adopt(*d, kv[k]);
            adopt(*d, kv[k + 1]);
            d->dict.emplace_back(kv[k], kv[k + 1]);
          }
          break;
        }
        case 'a': {
          Ptr v = pop();
          Ptr l = list_top();
          adopt(*l, v);
          l->items.push_back(v);
          break;
        }
        case 'e': {
          std::vector<Ptr> vs = pop_mark();
          Ptr l = list_top();
          for (const auto& v : vs) adopt(*l, v);
          l->items.insert(l->items.end(), vs.begin(), vs.end());
          break;
        }
        case '0':
          pop();
          break;  // POP
        case '2':
          push(top());
          break;  // DUP
        case 'i':
        case 'o':
        case 0x81:
        case 0x92:
        case 0x82:
        case 0x83:
        case 0x84:
          CYPRIS_FAIL(
              "{}: refuses pickle opcode 0x{:02x}, which creates objects by running their code; Cypris reads "
              "only tensors from PyTorch checkpoints",
              where_, op);
        default:
          CYPRIS_FAIL("{}: unsupported pickle opcode 0x{:02x} at byte {}; not a torch.save state dict", where_, op,
                      pos() - 1);
      }
    }
  }

 private:
  uint64_t pos() const { return static_cast<uint64_t>(p_ - begin_); }
  uint8_t byte() { return *take(1); }
  const uint8_t* take(uint64_t n) {
    CYPRIS_CHECK(n <= static_cast<uint64_t>(end_ - p_), "{}: truncated pickle", where_);
    const uint8_t* r = p_;
    p_ += n;
    return r;
  }
  std::string line() {
    const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(p_, '\n', static_cast<size_t>(end_ - p_)));
    CYPRIS_CHECK(nl != nullptr, "{}: truncated pickle", where_);
    std::string s(reinterpret_cast<const char*>(p_), static_cast<size_t>(nl - p_));
    p_ = nl + 1;
    return s;
  }
  void push(Ptr v) { stack_.push_back(std::move(v)); }
  void push_int(int64_t x) {
    Ptr v = make(Kind::Int);
    v->i = x;
    push(v);
  }
  void push_str(uint64_t n) {
    const uint8_t* b = take(n);
    Ptr v = make(Kind::Str);
    v->s.assign(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
    push(v);
  }
  Ptr top() {
    CYPRIS_CHECK(!stack_.empty() && stack_.back()->kind != Kind::Mark, "{}: malformed pickle (empty stack)", where_);
    return stack_.back();
  }
  Ptr pop() {
    Ptr v = top();
    stack_.pop_back();
    return v;
  }
  // Puts child into parent (a container), keeping the nesting bounded.
  void adopt(Value& parent, const Ptr& child) {
    CYPRIS_CHECK(&parent != child.get(), "{}: a container that holds itself; not a state dict", where_);
    child->adopted = true;
    parent.depth = std::max(parent.depth, child->depth + 1);
    CYPRIS_CHECK(parent.depth <= kMaxDepth, "{}: the pickle nests deeper than {} levels; not a state dict", where_,
                 kMaxDepth);
  }
  Ptr container(Kind k, std::vector<Ptr> items) {
    Ptr c = make(k);
    for (const auto& i : items) adopt(*c, i);
    c->items = std::move(items);
    return c;
  }
  std::vector<Ptr> pop_mark() {
    auto it = std::find_if(stack_.rbegin(), stack_.rend(), [](const Ptr& v) { return v->kind == Kind::Mark; });
    CYPRIS_CHECK(it != stack_.rend(), "{}: malformed pickle (no MARK)", where_);
    const auto mark = it.base() - 1;
    std::vector<Ptr> out(mark + 1, stack_.end());
    stack_.erase(mark, stack_.end());
    return out;
  }
  Ptr dict_top() {
    Ptr d = top();
    CYPRIS_CHECK(d->kind == Kind::Dict, "{}: malformed pickle (SETITEM on something that is not a dict)", where_);
    CYPRIS_CHECK(!d->adopted, "{}: the pickle changes a dict after putting it in another; not a state dict", where_);
    return d;
  }
  Ptr list_top() {
    Ptr l = top();
    CYPRIS_CHECK(l->kind == Kind::List, "{}: malformed pickle (APPEND on something that is not a list)", where_);
    CYPRIS_CHECK(!l->adopted, "{}: the pickle changes a list after putting it in another; not a state dict", where_);
    return l;
  }
  Ptr memo_get(uint32_t k) {
    auto it = memo_.find(k);
    CYPRIS_CHECK(it != memo_.end(), "{}: malformed pickle (memo {} unset)", where_, k);
    return it->second;
  }
  Ptr global(const std::string& module, const std::string& name) {
    CYPRIS_CHECK(allowed_global(module, name),
                 "{}: the pickle asks for {}.{}, which a Python unpickler would import and may run; Cypris reads only "
                 "tensor storages from PyTorch checkpoints and refuses anything that would run code (use a "
                 "safetensors copy of the model)",
                 where_, module, name);
    Ptr g = make(Kind::Global);
    g->s = module + "." + name;
    return g;
  }
  Ptr persistent(const Ptr& pid) {
    // ('storage', torch.<T>Storage, key, location, numel)
    const bool ok = pid->kind == Kind::Tuple && pid->items.size() == 5 && pid->items[0]->kind == Kind::Str &&
                    pid->items[0]->s == "storage" && pid->items[1]->kind == Kind::Global &&
                    pid->items[1]->s.rfind("torch.", 0) == 0 && pid->items[1]->s.size() > 13 &&
                    pid->items[1]->s.compare(pid->items[1]->s.size() - 7, 7, "Storage") == 0 &&
                    pid->items[2]->kind == Kind::Str && pid->items[4]->kind == Kind::Int && pid->items[4]->i >= 0;
    CYPRIS_CHECK(ok, "{}: unsupported persistent id (expected a torch storage)", where_);
    Ptr s = make(Kind::Storage);
    s->storage_type = pid->items[1]->s.substr(6);
    s->s = pid->items[2]->s;
    s->i = pid->items[4]->i;
    return s;
  }
  std::vector<int64_t> ints(const Ptr& t, const char* what) {
    CYPRIS_CHECK(t->kind == Kind::Tuple && t->items.size() <= 16, "{}: tensor {} must be a tuple of integers", where_,
                 what);
    std::vector<int64_t> out;
    for (const auto& e : t->items) {
      CYPRIS_CHECK(e->kind == Kind::Int && e->i >= 0, "{}: tensor {} must be non-negative integers", where_, what);
      out.push_back(e->i);
    }
    return out;
  }
  Ptr call(const Ptr& fn, const Ptr& args) {
    CYPRIS_CHECK(fn->kind == Kind::Global && args->kind == Kind::Tuple,
                 "{}: refuses a call (REDUCE) of something that is not a known tensor function", where_);
    const auto& a = args->items;
    if (fn->s == "collections.OrderedDict") {
      CYPRIS_CHECK(a.empty(), "{}: OrderedDict with arguments", where_);
      return make(Kind::Dict);
    }
    if (fn->s == "torch._utils._rebuild_tensor_v2") {
      CYPRIS_CHECK(a.size() >= 4 && a[0]->kind == Kind::Storage && a[1]->kind == Kind::Int && a[1]->i >= 0,
                   "{}: malformed _rebuild_tensor_v2 arguments", where_);
      Ptr t = make(Kind::Tensor);
      t->items = {a[0]};
      adopt(*t, a[0]);
      t->i = a[1]->i;
      t->size = ints(a[2], "size");
      t->stride = ints(a[3], "stride");
      CYPRIS_CHECK(t->size.size() == t->stride.size(), "{}: tensor size and stride differ in length", where_);
      return t;
    }
    if (fn->s == "torch._utils._rebuild_parameter") {
      CYPRIS_CHECK(!a.empty() && a[0]->kind == Kind::Tensor, "{}: malformed _rebuild_parameter arguments", where_);
      return a[0];
    }
    CYPRIS_FAIL("{}: refuses to call {}: Cypris reads only tensors from PyTorch checkpoints", where_, fn->s);
  }

  const uint8_t* p_;
  const uint8_t* begin_ = p_;
  const uint8_t* end_;
  std::string where_;
  std::vector<Ptr> stack_;
  std::unordered_map<uint32_t, Ptr> memo_;
};

struct StorageDType {
  const char* storage;
  const char* name;  // safetensors spelling
  size_t size;
  std::optional<DType> dtype;
};
const StorageDType kStorageDTypes[] = {
    {"FloatStorage", "F32", 4, DType::F32},      {"HalfStorage", "F16", 2, DType::F16},
    {"BFloat16Storage", "BF16", 2, DType::BF16}, {"DoubleStorage", "F64", 8, std::nullopt},
    {"LongStorage", "I64", 8, std::nullopt},     {"IntStorage", "I32", 4, std::nullopt},
    {"ShortStorage", "I16", 2, std::nullopt},    {"CharStorage", "I8", 1, std::nullopt},
    {"ByteStorage", "U8", 1, std::nullopt},      {"BoolStorage", "BOOL", 1, std::nullopt}};

}  // namespace

TorchFile::TorchFile(const std::filesystem::path& path) : path_(path) {
  const std::string p = path.string();
  const int fd = ::open(p.c_str(), O_RDONLY);
  CYPRIS_CHECK(fd >= 0, "{}: cannot open: {}", p, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    CYPRIS_FAIL("{}: cannot stat", p);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  CYPRIS_CHECK(size_ > 0 && map_ != MAP_FAILED, "{}: empty file or cannot be mapped", p);
  try {
    const auto* base = static_cast<const uint8_t*>(map_);
    const auto entries = read_zip(base, size_, p);
    std::string prefix;
    for (const auto& [name, e] : entries) {
      const size_t slash = name.find('/');
      if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
        prefix = name.substr(0, slash + 1);
      }
    }
    CYPRIS_CHECK(!prefix.empty(), "{}: no data.pkl in the archive; not a torch.save checkpoint", p);
    if (auto bo = entries.find(prefix + "byteorder"); bo != entries.end()) {
      const std::string order(reinterpret_cast<const char*>(bo->second.data), bo->second.size);
      CYPRIS_CHECK(order == "little", "{}: byteorder '{}' (only little-endian checkpoints are read)", p, order);
    }
    const ZipEntry& pkl = entries.at(prefix + "data.pkl");
    Ptr root = Unpickler(pkl.data, pkl.size, p + ": data.pkl").run();
    CYPRIS_CHECK(root->kind == Kind::Dict, "{}: data.pkl is not a state dict (a dict of tensors)", p);
    for (const auto& [k, v] : root->dict) {
      CYPRIS_CHECK(k->kind == Kind::Str, "{}: a state dict key is not a string", p);
      if (v->kind != Kind::Tensor) continue;  // other entries (e.g. a step counter) are not weights
      const std::string& name = k->s;
      const Value& storage = *v->items[0];
      const StorageDType* sd = nullptr;
      for (const auto& d : kStorageDTypes) {
        if (storage.storage_type == d.storage) sd = &d;
      }
      CYPRIS_CHECK(sd != nullptr, "{}: tensor '{}': unknown storage type {}", p, name, storage.storage_type);
      auto entry = entries.find(prefix + "data/" + storage.s);
      CYPRIS_CHECK(entry != entries.end(), "{}: tensor '{}': storage '{}' is missing from the archive", p, name,
                   storage.s);
      CYPRIS_CHECK(static_cast<uint64_t>(storage.i) <= entry->second.size / sd->size &&
                       entry->second.size == static_cast<uint64_t>(storage.i) * sd->size,
                   "{}: tensor '{}': storage '{}' holds {} bytes, not {} elements of {}", p, name, storage.s,
                   entry->second.size, storage.i, sd->name);
      uint64_t numel = 1;
      int64_t expect = 1;
      bool contiguous = true;
      for (size_t d = v->size.size(); d-- > 0;) {
        const uint64_t n = static_cast<uint64_t>(v->size[d]);
        CYPRIS_CHECK(n == 0 || numel <= (uint64_t{1} << 62) / n, "{}: tensor '{}': shape is too large", p, name);
        numel *= n;
        if (n != 1 && v->stride[d] != expect) contiguous = false;
        expect *= v->size[d];
      }
      CYPRIS_CHECK(contiguous,
                   "{}: tensor '{}' is not contiguous in its storage (stride {}); save the state dict of contiguous "
                   "tensors",
                   p, name, nlohmann::json(v->stride).dump());
      CYPRIS_CHECK(static_cast<uint64_t>(v->i) <= static_cast<uint64_t>(storage.i) &&
                       numel <= static_cast<uint64_t>(storage.i) - static_cast<uint64_t>(v->i),
                   "{}: tensor '{}': offset {} + {} elements exceed its storage of {}", p, name, v->i, numel,
                   storage.i);
      SafetensorsTensor t;
      t.name = name;
      t.dtype_name = sd->name;
      t.dtype = sd->dtype;
      t.shape = v->size;
      t.data = entry->second.data + static_cast<uint64_t>(v->i) * sd->size;
      t.nbytes = static_cast<size_t>(numel * sd->size);
      CYPRIS_CHECK(tensors_.emplace(name, std::move(t)).second, "{}: tensor '{}' appears twice", p, name);
    }
  } catch (...) {
    ::munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

TorchFile::~TorchFile() {
  if (map_) ::munmap(map_, size_);
}

bool TorchCheckpoint::present(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("pytorch_model", 0) == 0 && e.path().extension() == ".bin") return true;
  }
  return false;
}

namespace {

bool is_torch_shard(const std::filesystem::path& p) {
  return p.filename().string().rfind("pytorch_model", 0) == 0 && p.extension() == ".bin";
}

const ShardNaming kTorchShards{"pytorch_model.bin.index.json", "pytorch_model.bin", is_torch_shard,
                               "pytorch_model*.bin files"};

}  // namespace

TorchCheckpoint::TorchCheckpoint(const std::filesystem::path& dir, const std::vector<std::string>& ignore_patterns) {
  index_shards(dir, kTorchShards, list_shards(dir, kTorchShards, ignore_patterns), files_, index_);
}

const SafetensorsTensor* TorchCheckpoint::find(const std::string& name, const TorchFile** file) const {
  auto it = index_.find(name);
  if (it == index_.end()) return nullptr;
  if (file) *file = it->second.second;
  return it->second.first;
}

}  // namespace cypris
