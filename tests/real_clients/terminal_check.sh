#!/usr/bin/env bash
# A terminal user's check: acpx in its interactive (TTY) mode inside tmux, driven by keystrokes.
# Types the command with the prompt, approves the permission dialogs with "y", and asserts on
# the captured screen that the streamed reply appeared and the file was written.
# usage: terminal_check.sh ACPX_BIN AGENT_BINARY WORKDIR   (PATH must reach Node >= 22.13)
set -euo pipefail
acpx=$1 agent=$2 work=$3
session=maka-term-$$
screen="$work/screen.txt"
mkdir -p "$work/ws" "$work/home"
cleanup() { tmux kill-session -t "$session" 2>/dev/null || true; }
trap cleanup EXIT

# The tmux server may not share this environment: pass what the agent needs explicitly.
tmux new-session -d -s "$session" -x 160 -y 50 \
  "env -i PATH='$PATH' TERM=xterm HOME='$work/home' MAKA_DATA_DIR='$work/data' MAKA_CONFIG='$work/no-config.json' MAKA_SCRIPT='${MAKA_SCRIPT:?}' PS1='READY> ' bash --norc --noprofile -i"
capture() { tmux capture-pane -p -t "$session" -S -200 > "$screen"; }
# Waits (bounded) until the screen shows $1.
wait_for() {
  for _ in $(seq 1 300); do
    capture
    if grep -qF -- "$1" "$screen"; then return 0; fi
    sleep 0.1
  done
  echo "terminal check: timed out waiting for: $1" >&2
  cat "$screen" >&2
  exit 1
}

wait_for 'READY>'
tmux send-keys -t "$session" "cd '$work/ws' && '$acpx' --ttl 1 --agent '$agent' exec 'please write the notes'" Enter
wait_for "Allow Write notes.txt [edit]? (y/N)"
tmux send-keys -t "$session" y Enter
# acpx also asks before it lets the agent write through fs/write_text_file.
wait_for "Allow write? (y/N)"
tmux send-keys -t "$session" y Enter
wait_for "[done] end_turn"
capture
grep -qF "I'll write notes.txt." "$screen"
grep -qF "Done: notes.txt written." "$screen"
if grep -qF "[error]" "$screen"; then
  echo "terminal check: the screen shows an error" >&2
  cat "$screen" >&2
  exit 1
fi
test "$(cat "$work/ws/notes.txt")" = "hello from maka"
# The streamed reply came before the end of the turn.
reply_line=$(grep -nF "Done: notes.txt written." "$screen" | head -1 | cut -d: -f1)
done_line=$(grep -nF "[done] end_turn" "$screen" | head -1 | cut -d: -f1)
test "$reply_line" -lt "$done_line"
echo "terminal check: typed a prompt, approved the permission, saw the streamed reply (screen: $screen)"

# The terminal auth method's program, in the same terminal: `maka-acp login`.
config="$work/login/config.json"
tmux send-keys -t "$session" "clear; MAKA_CONFIG='$config' '$agent' login" Enter
wait_for "Provider [1]:"
tmux send-keys -t "$session" 2 Enter
wait_for "Base URL ["
tmux send-keys -t "$session" "http://127.0.0.1:9/v1" Enter
wait_for "Model (as the endpoint names it):"
tmux send-keys -t "$session" llama3 Enter
wait_for "typing is hidden"
tmux send-keys -t "$session" "sk-typed-under-tmux" Enter
wait_for "Saved: model llama3"
capture
if grep -qF "sk-typed-under-tmux" "$screen"; then
  echo "login check: the key was echoed" >&2
  cat "$screen" >&2
  exit 1
fi
grep -qF '"apiKey": "sk-typed-under-tmux"' "$config"
test "$(stat -c %a "$config")" = 600
echo "login check: maka-acp login under tmux saved the provider with mode 0600, key not echoed"
