#!/usr/bin/env bash
# e2e: the whole hobbyist path in the desktop app under Xvfb: set the model (stories260k from the
# test data), Load, type a message, Enter, wait for the streamed reply, screenshot; then a reply with
# the structured-output field set to the choices yes / no.
#   ui_chat_stories260k.sh CYPRIS_BINARY HAVE_UI(ON|OFF) OUT_DIR TESTDATA_DIR
set -u
bin="$1"; have_ui="$2"; out="$3"; testdata="$4"
[ "$have_ui" = "ON" ] || { echo "SKIP: this build has no desktop UI"; exit 77; }
command -v xvfb-run >/dev/null || { echo "SKIP: xvfb-run not installed"; exit 77; }
model="$testdata/models/stories260k"
[ -f "$model/config.json" ] || { echo "SKIP: $model not found"; exit 77; }

rm -rf "$out"; mkdir -p "$out/config"
cat > "$out/chat.txt" <<SCRIPT
set model $model
set max-model-len 256
sampler temperature 0
sampler max_tokens 32
load
wait_loaded 120
type Once upon a time
send
wait_reply 120
expect_reply
screenshot $out/chat.png
structured choice yes\nno
close options
open samplers
frames 60
screenshot $out/structured.png
type Is it a story?
send
wait_reply 120
expect_reply
quit 0
SCRIPT
export XDG_CONFIG_HOME="$out/config"
bash "$(dirname "$0")/xvfb_run.sh" "$out/Xauthority" 300 "$bin" --ui-script "$out/chat.txt" > "$out/app.log" 2>&1
rc=$?
cat "$out/app.log"
[ $rc -eq 0 ] || { echo "FAIL: cypris exited with $rc"; exit 1; }
# The reply may start with a newline: look for text anywhere after "reply:".
sed -n '/^reply:/,$p' "$out/app.log" | tr -d ' \n' | grep -q '^reply:.' || { echo "FAIL: no reply text"; exit 1; }
[ -s "$out/chat.png" ] || { echo "FAIL: no screenshot"; exit 1; }
# The second reply was asked for with the structured-output field set to the choices yes / no.
# (Like the first, it may start with a newline: the last "reply:" block, blanks dropped.)
last=$(awk '/^reply:/{b=""; on=1} /^[IWE] [0-9]/{on=0} on{b=b $0} END{print b}' "$out/app.log" | tr -d ' ')
[ "$last" = "reply:yes" ] || [ "$last" = "reply:no" ] || { echo "FAIL: the structured reply is not yes or no: $last"; exit 1; }
[ -s "$out/structured.png" ] || { echo "FAIL: no structured-output screenshot"; exit 1; }
echo PASS
