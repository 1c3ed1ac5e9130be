#include "engine/common/heap.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace cypris {

int limit_malloc_arenas(int max_arenas) {
#if defined(__GLIBC__)
  const char* env = std::getenv("MALLOC_ARENA_MAX");
  if ((env && *env) || max_arenas <= 0) return 0;
  return mallopt(M_ARENA_MAX, max_arenas) == 1 ? max_arenas : 0;
#else
  (void)max_arenas;
  return 0;
#endif
}

bool release_free_heap() {
#if defined(__GLIBC__)
  return malloc_trim(0) == 1;
#else
  return false;
#endif
}

size_t malloc_arena_count() {
#if defined(__GLIBC__)
  // malloc_info's XML lists one <heap nr="..."> per arena.
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (!f) return 0;
  const int rc = malloc_info(0, f);
  std::fclose(f);
  size_t count = 0;
  if (rc == 0 && buf) {
    for (const char* p = buf; (p = std::strstr(p, "<heap nr=")) != nullptr; ++p) ++count;
  }
  std::free(buf);
  return count;
#else
  return 0;
#endif
}

}  // namespace cypris
