// PCRE2 wrapper. See regex.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tokenizer/regex.h"

#include <pcre2.h>

#include "engine/common/error.h"

namespace cypris {
namespace {

// One JIT stack and match context per thread: the default 32 KiB stack is too small for long runs
// matched by patterns such as `\s+(?!\S)`.
struct ThreadMatchState {
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    ctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 4 * 1024 * 1024, nullptr);
    if (ctx && stack) pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~ThreadMatchState() {
    if (stack) pcre2_jit_stack_free(stack);
    if (ctx) pcre2_match_context_free(ctx);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(md); }
};

}  // namespace

Regex::Regex(std::string_view pattern, bool literal, std::string_view where) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  uint32_t opts = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts, &err, &err_off, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    CYPRIS_FAIL("{}: regex '{}' does not compile at offset {}: {}", where, pattern, err_off,
                reinterpret_cast<const char*>(buf));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
  code_ = code;
}

Regex::~Regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchData md(code);
  auto& ts = thread_state();
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  while (pos <= s.size()) {
    int rc = pcre2_match(code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md.md, ts.ctx);
    if (rc < 0) {
      CYPRIS_CHECK(rc == PCRE2_ERROR_NOMATCH, "tokenizer regex '{}' failed on input (PCRE2 error {})", pattern_, rc);
      break;
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.md);
    size_t start = ov[0], end = ov[1];
    out.emplace_back(start, end);
    if (end == start) {
      if (end >= s.size()) break;
      // Step over one whole character after an empty match.
      pos = end + 1;
      while (pos < s.size() && (uint8_t(s[pos]) & 0xC0) == 0x80) ++pos;
    } else {
      pos = end;
    }
  }
}

bool Regex::matches_at(std::string_view s, size_t at) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchData md(code);
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), at, PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED,
                       md.md, thread_state().ctx);
  return rc >= 0;
}

}  // namespace cypris
