#!/bin/sh
# Runs a GPU test binary under compute-sanitizer (tool: memcheck, racecheck, initcheck, synccheck).
# Exits 77 (ctest: skipped) when the machine has no GPU or no compute-sanitizer.
# Usage: run_compute_sanitizer.sh TOOL BINARY [gtest args...]
tool="$1"; shift
binary="$1"; shift
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
[ -x "$sanitizer" ] || { echo "compute-sanitizer not found: skipped"; exit 77; }
nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
exec "$sanitizer" --tool "$tool" --error-exitcode 1 "$binary" "$@"
