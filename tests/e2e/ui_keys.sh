#!/usr/bin/env bash
# e2e: the chat's keyboard shortcuts with real key events (xdotool) under Xvfb: Shift+Enter adds a
# new line to the message, Enter sends it (without a model the send is refused with "load a model
# first", which proves Enter reached send). Esc-stops-the-reply needs the engine (see
# ui_chat_stories260k.sh); it was checked by hand against a scripted stream.
#   ui_keys.sh CYPRIS_BINARY HAVE_UI(ON|OFF) OUT_DIR
# Exit 77 (skipped) without xvfb-run, xdotool or a UI build.
set -u
bin="$1"; have_ui="$2"; out="$3"
[ "$have_ui" = "ON" ] || { echo "SKIP: this build has no desktop UI"; exit 77; }
command -v xvfb-run >/dev/null || { echo "SKIP: xvfb-run not installed"; exit 77; }
command -v xdotool >/dev/null || { echo "SKIP: xdotool not installed"; exit 77; }

rm -rf "$out"; mkdir -p "$out/config"
cat > "$out/keys.txt" <<SCRIPT
close options
wait_input first line\nsecond line
wait_chat_error load a model
screenshot $out/keys.png
quit 0
SCRIPT
cat > "$out/drive.sh" <<DRIVE
#!/usr/bin/env bash
export XDG_CONFIG_HOME="$out/config"
"$bin" --ui-script "$out/keys.txt" &
app=\$!
win=\$(xdotool search --sync --name '^Cypris\$' | head -1)
sleep 1
xdotool mousemove --window "\$win" 880 660 click 1   # into the chat input
sleep 0.3
xdotool type --delay 30 "first line"
xdotool keydown shift; sleep 0.1; xdotool keydown Return; sleep 0.1; xdotool keyup Return; xdotool keyup shift
xdotool type --delay 30 "second line"
sleep 0.3
xdotool keydown Return; sleep 0.1; xdotool keyup Return
wait \$app
DRIVE
chmod +x "$out/drive.sh"
bash "$(dirname "$0")/xvfb_run.sh" "$out/Xauthority" 120 "$out/drive.sh" > "$out/app.log" 2>&1
rc=$?
cat "$out/app.log"
[ $rc -eq 0 ] || { echo "FAIL: exit code $rc"; exit 1; }
[ -s "$out/keys.png" ] || { echo "FAIL: no screenshot"; exit 1; }
echo PASS
