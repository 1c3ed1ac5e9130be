#!/usr/bin/env bash
# e2e: start the desktop app under Xvfb with a --ui-script that opens every panel, tries a load
# that fails (the app must stay up and go on), and saves a screenshot per step; then checks each
# PNG with an independent reader (tests/tools/png_stats.py): right size, not blank.
#   ui_panels.sh CYPRIS_BINARY HAVE_UI(ON|OFF) OUT_DIR SOURCE_DIR
# Exit 77 (skipped) without xvfb-run, without a UI build, or without /usr/bin/python3.
set -u
bin="$1"; have_ui="$2"; out="$3"; src="$4"
[ "$have_ui" = "ON" ] || { echo "SKIP: this build has no desktop UI"; exit 77; }
command -v xvfb-run >/dev/null || { echo "SKIP: xvfb-run not installed"; exit 77; }
[ -x /usr/bin/python3 ] || { echo "SKIP: /usr/bin/python3 needed to read the screenshots"; exit 77; }

rm -rf "$out"; mkdir -p "$out/config"
cat > "$out/panels.txt" <<SCRIPT
# Every panel in turn, one screenshot each.
open models
close options
screenshot $out/models.png
close models
open options
set max-num-seqs 8
set tensor-parallel-size 2
screenshot $out/options.png
options_view advanced_all
screenshot $out/options_advanced.png
options_view quick
set tensor-parallel-size 1
close options
open samplers
sampler temperature 0.7
screenshot $out/samplers.png
close samplers
open server
screenshot $out/server.png
close server
open stats
open logs
# A load that fails: the error shows and the window stays usable. (No wait_loaded here: it ends
# the script when a load fails; the second script below checks that.)
set model $out/no-such-model
load
frames 10
type Hello from the test
screenshot $out/stats_logs.png
quit 0
SCRIPT

export XDG_CONFIG_HOME="$out/config"
bash "$(dirname "$0")/xvfb_run.sh" "$out/Xauthority" 120 "$bin" --ui-script "$out/panels.txt" > "$out/app.log" 2>&1
rc=$?
cat "$out/app.log"
[ $rc -eq 0 ] || { echo "FAIL: cypris exited with $rc"; exit 1; }

fail=0
for shot in models options options_advanced samplers server stats_logs; do
  f="$out/$shot.png"
  if [ ! -s "$f" ]; then echo "FAIL: $f missing"; fail=1; continue; fi
  read -r w h colours busy < <(/usr/bin/python3 "$src/tests/tools/png_stats.py" "$f")
  echo "$shot.png: ${w}x${h}, $colours colours, $busy of the pixels not background"
  if [ "$w" -ne 1280 ] || [ "$h" -ne 800 ]; then echo "FAIL: $f is ${w}x${h}, expected 1280x800"; fail=1; fi
  if [ "$colours" -lt 20 ]; then echo "FAIL: $f looks blank ($colours colours)"; fail=1; fi
  if ! awk -v b="$busy" 'BEGIN { exit !(b > 0.05) }'; then echo "FAIL: $f is almost all background"; fail=1; fi
done
grep -q "engine not available in this build\|loading .* failed" "$out/app.log" || {
  echo "FAIL: the failed load was not logged"; fail=1; }

# The failed load, checked by the script itself: wait_loaded must report it (exit 3, message).
cat > "$out/fail.txt" <<SCRIPT
set model $out/no-such-model
load
wait_loaded 30
quit 0
SCRIPT
bash "$(dirname "$0")/xvfb_run.sh" "$out/Xauthority" 120 "$bin" --ui-script "$out/fail.txt" > "$out/fail.log" 2>&1
rc=$?
if [ $rc -ne 3 ] || ! grep -q "load failed" "$out/fail.log"; then
  echo "FAIL: a failed load should end wait_loaded with exit 3 and say why (got $rc)"; cat "$out/fail.log"; fail=1
fi
[ $fail -eq 0 ] && echo "PASS"
exit $fail
