#!/usr/bin/env bash
# e2e: the official `openai` npm package against `cypris --no-ui` on stories260k.
#   openai_npm.sh CYPRIS_BINARY TESTDATA_DIR WORK_DIR
# Installs the package into WORK_DIR (npm registry); exit 77 = skipped (no node/npm, or the
# package cannot be installed here).
set -u
bin="$1"; testdata="$2"; work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
command -v node >/dev/null && command -v npm >/dev/null || { echo "SKIP: node/npm not installed"; exit 77; }
mkdir -p "$work"
if [ ! -d "$work/node_modules/openai" ]; then
  (cd "$work" && timeout 300 npm install --silent --no-audit --no-fund openai@4 >/dev/null 2>&1) ||
    { echo "SKIP: cannot install the openai npm package"; exit 77; }
fi
cp "$here/openai_client.mjs" "$work/"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
model="$testdata/models/stories260k"
"$bin" --no-ui --model "$model" --served-model-name stories --host 127.0.0.1 --port "$port" \
  --api-keys test-key --threads 2 --cpu-kvcache-space 0.1 --disable-log-stats > "$work/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { cat "$work/server.log"; echo "FAIL: the server exited"; exit 1; }
  sleep 0.2
done
expected="$(cat "$model/expected_greedy_200_from_bos.txt")"
(cd "$work" && timeout 120 node openai_client.mjs "$port" "$expected") || { cat "$work/server.log"; exit 1; }
kill -TERM $pid; wait $pid; rc=$?
[ $rc -eq 0 ] || { echo "FAIL: the server exited with $rc after SIGTERM"; exit 1; }
trap - EXIT
