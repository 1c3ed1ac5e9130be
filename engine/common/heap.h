// The process heap (glibc malloc): how many arenas it may keep and giving freed memory back to
// the system. glibc gives each thread that meets a locked arena a new one (up to 8 per core) and
// keeps their freed pages, so a server with hundreds of HTTP threads held gigabytes after a
// storm of large requests (issue #26). The server limits the arenas at start-up and trims the
// heap after large requests and when the engine goes idle. No-ops on other C libraries.
#pragma once

#include <cstddef>

namespace cypris {

// The arenas the server keeps by default (glibc's is 8 per core).
inline constexpr int kServerMallocArenas = 4;

// Caps malloc's arenas at max_arenas unless MALLOC_ARENA_MAX is set in the environment (the
// user's choice wins). Returns the cap applied, 0 when none was.
int limit_malloc_arenas(int max_arenas);

// Gives the free memory of every arena back to the system (malloc_trim). Returns true when
// some was given back.
bool release_free_heap();

// How many arenas malloc has made so far (0 when unknown).
size_t malloc_arena_count();

}  // namespace cypris
