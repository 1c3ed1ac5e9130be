#!/usr/bin/env bash
# Runs a command under a fresh Xvfb screen (1280x800x24) for the e2e tests:
#   xvfb_run.sh AUTH_FILE TIMEOUT_S COMMAND [ARG ...]
# The X authority cookie goes to AUTH_FILE (in the test's own output folder) instead of
# xvfb-run's temporary folder: xvfb-run removes that folder while the server may still be
# writing there, and when the removal races it exits 5 instead of the command's status.
# Exits with the command's status (124 after TIMEOUT_S).
set -u
auth="$1"; limit="$2"; shift 2
rm -f "$auth"; : > "$auth"
exec timeout "$limit" xvfb-run -a -f "$auth" -s "-screen 0 1280x800x24" "$@"
