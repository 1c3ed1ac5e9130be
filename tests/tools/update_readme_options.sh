#!/usr/bin/env bash
# Regenerates the option reference in README.md from the option table.
# usage: tests/tools/update_readme_options.sh [path/to/cypris]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${1:-$root/build/app/cypris}"
table="$("$bin" --help-markdown)"
python3 - "$root/README.md" "$table" <<'PY'
import sys
path, table = sys.argv[1], sys.argv[2]
text = open(path).read()
begin, end = "<!-- options:begin -->", "<!-- options:end -->"
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(path, "w").write(head + begin + "\n" + table.strip("\n") + "\n" + end + tail)
PY
