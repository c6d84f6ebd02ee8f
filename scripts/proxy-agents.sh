#!/usr/bin/env bash
# Run the five npm coding agents THROUGH `cacheline proxy` (its launcher: `cacheline proxy
# --upstream … --log FILE -- AGENT …`) against the scripted offline upstream
# (scripts/agents/upstream.py), and check, per agent (scripts/agents/check_proxy_run.py):
#   (a) the bytes the upstream received equal the bytes the agent sent, on every request
#       (the upstream's --raw-log against the request bodies in the proxy's --log);
#   (b) `cacheline audit` on the proxy's --log reproduces every verdict line it printed;
#   (c) the proxy's exit code is the child's.
#
# Usage:  scripts/proxy-agents.sh [agent ...]
#         scripts/proxy-agents.sh --per-launch [agent ...]
#         scripts/proxy-agents.sh --concurrent AGENT AGENT
#         scripts/proxy-agents.sh --damaged AGENT
#         agents: claude-code codex gemini-cli qwen-code opencode (default: all)
#
# By default one proxy spans each agent's two turns. The other modes run each turn (a first
# prompt, then two resumes: --continue / --resume / exec resume, as capture-agents.sh does
# them) as its OWN launch, `cacheline proxy --log SHARED --state SHARED -- AGENT …`, one
# launch per agent process, all sharing one --log and one --state:
#   --per-launch  the agents one after the other;
#   --concurrent  two agents at once (two terminals), each its three launches;
#   --damaged     one agent three times, its state damaged between turns 1 and 2 (a torn
#                 last line appended), then of another version (set aside), then full (a
#                 4 KiB cap, --state-max-bytes: every append from the second on compacts it).
# and check (check_proxy_run.py --launches), per agent: every request forwarded byte for
# byte, every printed verdict equal to `cacheline audit` of the shared log (but where the
# state was set aside, see --damaged), a resumed request never `cold_start` when its session
# was seen, every launch exiting 0, and each state warning printed once.
# Env:    CACHELINE_BIN   the cacheline binary (default: target/debug/cacheline)
#         PROXY_UPSTREAM  a real upstream (a llama.cpp server) instead of the scripted one,
#                         behind scripts/agents/relay.py, which records the bytes it
#                         receives; the agents' model then comes from PROXY_MODEL
#         CI=true         a missing node or agent fails instead of being skipped
# Prints one "PASS <agent> …" / "FAIL <agent> …" / "SKIPPED: <reason>" line per agent on
# stdout; exits 1 if any agent failed.
#
# The agents are installed from npm at the pinned versions of scripts/capture-agents.sh
# into ${CACHELINE_CACHE_DIR:-$HOME/.cache/cacheline}/agents (never inside the repo).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The agents' quiet configurations, shared with capture-agents.sh.
. "$ROOT/scripts/agents/configs.sh"
CACHE="${CACHELINE_CACHE_DIR:-$HOME/.cache/cacheline}/agents"
WORK="${PROXY_AGENTS_WORK:-/tmp/cacheline-proxy-agents-$$}"
UPSTREAM="$ROOT/scripts/agents/upstream.py"
CHECK="$ROOT/scripts/agents/check_proxy_run.py"
BIN="${CACHELINE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/cacheline}"
TURN_TIMEOUT="${TURN_TIMEOUT:-180}"
in_ci() { [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; }

# The pinned versions, read from capture-agents.sh so they are bumped in one place.
pin() { sed -n "s/^$1=\"\(.*\)\"$/\1/p" "$ROOT/scripts/capture-agents.sh"; }

PROMPT1="List the files in the current directory."
PROMPT2="Now read notes.txt and tell me what it says."

log() { printf '== %s\n' "$*" >&2; }
skip_or_fail() { # reason
  if in_ci; then echo "FAIL $A: CI=true and $1"; FAILED=1; else echo "SKIPPED: $A: $1"; fi
}

install_agent() { # name pkg@version -> 0 when installed
  local dir="$CACHE/$1"
  if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$2" ]; then return 0; fi
  [ "${PROXY_AGENTS_INSTALL:-0}" = 1 ] || in_ci || return 1
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"private": true}' >"$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error "$2" >&2) || return 1
  echo "$2" >"$dir/.installed"
}

setup_dirs() { # [work dir, default $WORK]
  AW="${1:-$WORK}/$A"; PROJ="$AW/project"; AHOME="$AW/home"
  rm -rf "$AW"; mkdir -p "$PROJ/src" "$AHOME"
  printf '# demo\n\nA tiny project used to capture agent traffic.\n' >"$PROJ/README.md"
  printf 'Remember: the cache breaks when the prompt prefix changes.\n' >"$PROJ/notes.txt"
  printf 'def add(a, b):\n    return a + b\n' >"$PROJ/src/util.py"
  (cd "$PROJ" && git init -q && git add -A && git -c user.name=t -c user.email=t@example.invalid commit -qm init) >/dev/null 2>&1 || true
}

start_upstream() { # extra args...
  if [ -n "${PROXY_UPSTREAM:-}" ]; then # a real upstream, behind the recording relay
    python3 "$ROOT/scripts/agents/relay.py" --target "$PROXY_UPSTREAM" \
      --raw-log "$AW/upstream-raw.jsonl" --port-file "$AW/port" >"$AW/upstream.out" 2>&1 &
  else
  python3 "$UPSTREAM" --log "$AW/upstream.jsonl" --raw-log "$AW/upstream-raw.jsonl" \
    --workdir "$PROJ" --port-file "$AW/port" "$@" >"$AW/upstream.out" 2>&1 &
  fi
  UPSTREAM_PID=$!
  for _ in $(seq 100); do [ -s "$AW/port" ] && break; sleep 0.1; done
  URL="http://127.0.0.1:$(cat "$AW/port")"
}
stop_upstream() { [ -z "$UPSTREAM_PID" ] || { kill "$UPSTREAM_PID" 2>/dev/null; wait "$UPSTREAM_PID" 2>/dev/null; }; }

# Throwaway HOME, UTC, no proxies; the agent's own variables come after.
agent_env() {
  printf '%s\n' "HOME=$AHOME" "USER=t" "LOGNAME=t" "TZ=UTC" "LANG=C.UTF-8" \
    "PATH=$(dirname "$(command -v node)"):/usr/local/bin:/usr/bin:/bin" "TERM=dumb" "NO_COLOR=1" "CI=1" \
    "XDG_CONFIG_HOME=$AHOME/.config" "XDG_DATA_HOME=$AHOME/.local/share" \
    "XDG_CACHE_HOME=$AHOME/.cache" "XDG_STATE_HOME=$AHOME/.local/state" \
    "npm_config_update_notifier=false" "SHELL=/bin/bash"
}

# run_through_proxy TURN1_CMD... -- TURN2_CMD...: both turns in ONE proxy run (one child
# shell), so turn 2's requests are judged against turn 1's. The child records its own exit
# code in $AW/child.rc; the proxy's goes to $AW/proxy.rc.
run_through_proxy() {
  local -a t1=() t2=() env_args
  while [ $# -gt 0 ] && [ "$1" != -- ]; do t1+=("$1"); shift; done
  shift; t2=("$@")
  mapfile -t env_args < <(agent_env; printf '%s\n' "${AGENT_ENV[@]}")
  printf '%q ' "${t1[@]}" >"$AW/turn1.cmd"; printf '%q ' "${t2[@]}" >"$AW/turn2.cmd"
  whole_request >"$AW/whole.cmd"
  # @VAR@ in an argument is the launcher's $VAR, expanded when the child runs (codex's
  # provider takes its base URL only from config: -c model_providers.….base_url=…).
  sed -i 's/@\([A-Z_]*\)@/${\1}/g' "$AW/turn1.cmd" "$AW/turn2.cmd" "$AW/whole.cmd"
  cat >"$AW/child.sh" <<CHILD
#!/bin/bash
$(cat "$AW/turn1.cmd") </dev/null >"$AW/turn1.out" 2>"$AW/turn1.err"; r1=\$?
$(cat "$AW/turn2.cmd") </dev/null >"$AW/turn2.out" 2>"$AW/turn2.err"; r2=\$?
$(cat "$AW/whole.cmd") >"$AW/whole.out" 2>&1
rc=\$r2; [ \$r1 = 0 ] || rc=\$r1
echo "\$rc" >"$AW/child.rc"; exit "\$rc"
CHILD
  chmod +x "$AW/child.sh"
  local -a ups=()
  for api in anthropic openai gemini; do ups+=(--upstream "$api=$URL"); done
  log "$A: through the proxy to $URL"
  local rc=0
  (cd "$PROJ" && timeout "$((2 * TURN_TIMEOUT))" env -i "${env_args[@]}" \
    "$BIN" proxy "${ups[@]}" --log "$AW/proxy.jsonl" --state "$AW/state" -- /bin/bash "$AW/child.sh" \
    >"$AW/proxy.out" 2>"$AW/proxy.err") || rc=$?
  echo "$rc" >"$AW/proxy.rc"
}

check() {
  local extra=()
  # A real model may answer the agent with an error (a prompt over its context) or
  # nonsense: the agent may then fail; bytes, verdicts and exit codes are still checked.
  [ -n "${PROXY_UPSTREAM:-}" ] && extra=(--allow-agent-failure)
  if out="$(python3 "$CHECK" "${extra[@]}" --bin "$BIN" "$AW" 2>&1)"; then
    echo "PASS $A: $out"
  else
    echo "FAIL $A: $out"; FAILED=1
    for f in turn1.err turn2.err; do log "$A: $f tail:"; tail -n 8 "$AW/$f" >&2 2>/dev/null; done
  fi
}

# The agents stream every request; so each run also sends one WHOLE (non-streamed)
# request of the agent's API through the same proxy, via the launcher's base-URL
# variable, so bodies and replies both ways are compared streamed and whole. $WHOLE_API:
# anthropic, chat, responses or gemini.
whole_request() {
  local path body
  case "$WHOLE_API" in
    anthropic) path='@ANTHROPIC_BASE_URL@/v1/messages'
      body="{\"model\":\"$MODEL_A\",\"max_tokens\":64,\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT1\"}]}" ;;
    chat) path='@OPENAI_BASE_URL@/chat/completions'
      body="{\"model\":\"$MODEL_Q\",\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT1\"}]}" ;;
    responses) path='@OPENAI_BASE_URL@/responses'
      body="{\"model\":\"$MODEL_O\",\"stream\":false,\"input\":\"$PROMPT1\"}" ;;
    gemini) path="@GOOGLE_GEMINI_BASE_URL@/v1beta/models/$MODEL_G:generateContent"
      body="{\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"$PROMPT1\"}]}]}" ;;
  esac
  printf '%s\n' "$body" >"$AW/whole.json"
  printf 'curl -sS -o %q -H %q -H %q --data-binary @%q "%s"' "$AW/whole.reply" \
    'content-type: application/json' 'authorization: Bearer sk-test-0000' "$AW/whole.json" "$path"
}

# ---------------------------------------------------------------- agents
MODEL_A="${PROXY_MODEL:-claude-sonnet-4-5}"
MODEL_O="${PROXY_MODEL:-gpt-5-codex}"
MODEL_G="${PROXY_MODEL:-gemini-2.5-flash}"
MODEL_Q="${PROXY_MODEL:-qwen3-coder-plus}"

agent_claude_code() {
  WHOLE_API=anthropic
  local bin="$CACHE/claude-code/node_modules/.bin/claude"
  start_upstream
  # ANTHROPIC_BASE_URL: set by the launcher.
  AGENT_ENV=(
    "ANTHROPIC_API_KEY=sk-test-0000" "ANTHROPIC_MODEL=$MODEL_A" "ANTHROPIC_SMALL_FAST_MODEL=$MODEL_A"
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1" "DISABLE_AUTOUPDATER=1" "DISABLE_TELEMETRY=1"
    "DISABLE_ERROR_REPORTING=1" "DISABLE_BUG_COMMAND=1" "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL=1"
  )
  local tools="Bash(ls:*) Bash(pwd) Bash(cat:*) Read Glob Grep LS"
  run_through_proxy "$bin" -p "$PROMPT1" --output-format json --allowedTools "$tools" -- \
    "$bin" -p "$PROMPT2" --continue --output-format json --allowedTools "$tools"
}

agent_codex() {
  WHOLE_API=responses
  local bin="$CACHE/codex/node_modules/.bin/codex"
  start_upstream
  # codex reads no base-URL variable: its provider's base_url comes from config.toml or
  # -c; the user passes the launcher's OPENAI_BASE_URL with -c (through a shell, so it
  # expands in the child), and the key in the variable the provider's env_key names.
  codex_quiet
  local via='model_providers.cacheline.base_url="@OPENAI_BASE_URL@"'
  run_through_proxy "$bin" exec -c "$via" --skip-git-repo-check "$PROMPT1" -- \
    "$bin" exec -c "$via" --skip-git-repo-check resume --last "$PROMPT2"
}

agent_gemini_cli() {
  WHOLE_API=gemini
  local bin="$CACHE/gemini-cli/node_modules/.bin/gemini"
  start_upstream
  quiet_settings "$AHOME/.gemini" gemini-api-key
  # GOOGLE_GEMINI_BASE_URL: set by the launcher.
  AGENT_ENV=("GEMINI_API_KEY=sk-test-0000" "GEMINI_CLI_NO_RELAUNCH=true" "GEMINI_TELEMETRY_ENABLED=false")
  run_through_proxy "$bin" -m "$MODEL_G" --yolo -p "$PROMPT1" -- \
    "$bin" -m "$MODEL_G" --yolo --resume latest -p "$PROMPT2"
}

agent_qwen_code() {
  WHOLE_API=chat
  local bin="$CACHE/qwen-code/node_modules/.bin/qwen"
  start_upstream --models "$MODEL_Q"
  quiet_settings "$AHOME/.qwen" openai
  if [ -n "${PROXY_UPSTREAM:-}" ]; then # a small model's context: two tools only
    python3 - "$AHOME/.qwen/settings.json" <<'PY'
import json, sys
p = sys.argv[1]; s = json.load(open(p))
s["tools"] = {"core": ["list_directory", "read_file"]}
s["coreTools"] = ["list_directory", "read_file"]
json.dump(s, open(p, "w"), indent=2)
PY
  fi
  # OPENAI_BASE_URL: set by the launcher.
  AGENT_ENV=("OPENAI_API_KEY=sk-test-0000" "OPENAI_MODEL=$MODEL_Q" "QWEN_CODE_NO_RELAUNCH=true")
  run_through_proxy "$bin" --yolo -p "$PROMPT1" -- "$bin" --yolo --continue -p "$PROMPT2"
}

agent_opencode() {
  WHOLE_API=anthropic
  local bin="$CACHE/opencode/node_modules/.bin/opencode"
  start_upstream
  opencode_config
  run_through_proxy "$bin" run "$PROMPT1" -- "$bin" run --continue "$PROMPT2"
}

# ---------------------------------------------------------------- one launch per turn
PROMPT3="Finally, run pwd in the shell and tell me the directory."

# launch_turn N CMD...: turn N as its own launcher, `cacheline proxy --log $SHARED/proxy.jsonl
# --state $SHARED/state -- CMD…` (cwd = the project, env = agent_env + AGENT_ENV), its
# standard output, error and exit code in $AW/turns/N/.
launch_turn() {
  local n=$1; shift
  local td="$AW/turns/$n" rc=0
  local -a env_args ups=()
  mkdir -p "$td"
  mapfile -t env_args < <(agent_env; printf '%s\n' "${AGENT_ENV[@]}")
  for api in anthropic openai gemini; do ups+=(--upstream "$api=$URL"); done
  printf '%q ' "$@" >"$td/cmd"
  log "$A: turn $n, its own launch: $*"
  (cd "$PROJ" && timeout "$TURN_TIMEOUT" env -i "${env_args[@]}" "$BIN" proxy "${ups[@]}" \
    --log "$SHARED/proxy.jsonl" --state "$SHARED/state" "${STATE_ARGS[@]}" -- "$@" \
    </dev/null >"$td/proxy.out" 2>"$td/proxy.err") || rc=$?
  echo "$rc" >"$td/proxy.rc"
}

# The three turns of $A, each its own launch; BETWEEN_TURNS (a function name, or empty)
# runs after turn 1, on $SHARED.
launches() {
  local bin tools
  local -a t3
  case "$A" in
    claude-code)
      bin="$CACHE/claude-code/node_modules/.bin/claude"
      AGENT_ENV=(
        "ANTHROPIC_API_KEY=sk-test-0000" "ANTHROPIC_MODEL=$MODEL_A" "ANTHROPIC_SMALL_FAST_MODEL=$MODEL_A"
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1" "DISABLE_AUTOUPDATER=1" "DISABLE_TELEMETRY=1"
        "DISABLE_ERROR_REPORTING=1" "DISABLE_BUG_COMMAND=1" "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL=1"
      )
      tools="Bash(ls:*) Bash(pwd) Bash(cat:*) Read Glob Grep LS"
      launch_turn 1 "$bin" -p "$PROMPT1" --output-format json --allowedTools "$tools"
      between
      launch_turn 2 "$bin" -p "$PROMPT2" --continue --output-format json --allowedTools "$tools"
      # --resume names the session turn 1 printed.
      local sid
      sid="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["session_id"])' "$AW/turns/1/proxy.out" 2>/dev/null || true)"
      launch_turn 3 "$bin" -p "$PROMPT3" --resume "$sid" --output-format json --allowedTools "$tools" ;;
    codex)
      bin="$CACHE/codex/node_modules/.bin/codex"
      codex_quiet
      # The provider's base URL comes from -c only: the launcher's OPENAI_BASE_URL, expanded
      # by a shell that then becomes codex (exec).
      local via='exec "$0" exec -c "model_providers.cacheline.base_url=\"$OPENAI_BASE_URL\"" --skip-git-repo-check "$@"'
      launch_turn 1 /bin/sh -c "$via" "$bin" "$PROMPT1"
      between
      launch_turn 2 /bin/sh -c "$via" "$bin" resume --last "$PROMPT2"
      launch_turn 3 /bin/sh -c "$via" "$bin" resume --last "$PROMPT3" ;;
    gemini-cli)
      bin="$CACHE/gemini-cli/node_modules/.bin/gemini"
      quiet_settings "$AHOME/.gemini" gemini-api-key
      AGENT_ENV=("GEMINI_API_KEY=sk-test-0000" "GEMINI_CLI_NO_RELAUNCH=true" "GEMINI_TELEMETRY_ENABLED=false")
      launch_turn 1 "$bin" -m "$MODEL_G" --yolo -p "$PROMPT1"
      between
      launch_turn 2 "$bin" -m "$MODEL_G" --yolo --resume latest -p "$PROMPT2"
      launch_turn 3 "$bin" -m "$MODEL_G" --yolo --resume latest -p "$PROMPT3" ;;
    qwen-code)
      bin="$CACHE/qwen-code/node_modules/.bin/qwen"
      quiet_settings "$AHOME/.qwen" openai
      AGENT_ENV=("OPENAI_API_KEY=sk-test-0000" "OPENAI_MODEL=$MODEL_Q" "QWEN_CODE_NO_RELAUNCH=true")
      launch_turn 1 "$bin" --yolo -p "$PROMPT1"
      between
      launch_turn 2 "$bin" --yolo --continue -p "$PROMPT2"
      launch_turn 3 "$bin" --yolo --continue -p "$PROMPT3" ;;
    opencode)
      bin="$CACHE/opencode/node_modules/.bin/opencode"
      opencode_config
      launch_turn 1 "$bin" run "$PROMPT1"
      between
      launch_turn 2 "$bin" run --continue "$PROMPT2"
      launch_turn 3 "$bin" run --continue "$PROMPT3" ;;
  esac
}
between() { [ -z "${BETWEEN_TURNS:-}" ] || "$BETWEEN_TURNS"; }

# Damage done to $SHARED/state between turns 1 and 2.
torn_tail() { # an entry cut short, as a crash mid-write leaves it
  printf '0123456789abcdef {"log":null,"line":3,"offset":' >>"$SHARED/state/sessions.journal"
}
other_version() { # a journal of a later format version
  sed -i '1s/^cacheline-sessions 1 /cacheline-sessions 2 /' "$SHARED/state/sessions.journal"
}

# codex's config (its provider's base URL replaced per launch with -c).
codex_quiet() {
  codex_config "$AHOME/.codex" "$MODEL_O" "through cacheline proxy" "http://127.0.0.1:9/v1" "$PROJ"
}

# opencode's config and environment: its Anthropic provider wants the base URL WITH /v1;
# the launcher's ANTHROPIC_BASE_URL has none, so the config adds it ({env:…} is opencode's
# substitution).
opencode_config() {
  cat >"$PROJ/opencode.json" <<CFG
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "model": "anthropic/$MODEL_A",
  "small_model": "anthropic/$MODEL_A",
  "permission": {"bash": "allow", "edit": "allow", "webfetch": "deny"},
  "provider": {"anthropic": {"options": {"baseURL": "{env:ANTHROPIC_BASE_URL}/v1", "apiKey": "sk-test-0000"}}}
}
CFG
  (cd "$PROJ" && git add -A && git -c user.name=t -c user.email=t@example.invalid commit -qm config) >/dev/null 2>&1 || true
  AGENT_ENV=("OPENCODE_DISABLE_AUTOUPDATE=1" "OPENCODE_DISABLE_MODELS_FETCH=1"
    "OPENCODE_DISABLE_LSP_DOWNLOAD=1" "OPENCODE_DISABLE_SHARE=1" "OPENCODE_DISABLE_DEFAULT_PLUGINS=1")
}

# One agent's three launches in $1 (a work dir), its state and log in $SHARED.
agent_launches() { # work dir
  setup_dirs "$1"
  start_upstream $([ "$A" = qwen-code ] && echo --models "$MODEL_Q")
  launches
  stop_upstream
}

# check_launches LABEL [check options] -- AGENT_DIR...: one PASS/FAIL line per agent.
check_launches() {
  local label=$1; shift
  local -a opts=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  local out rc=0
  out="$(python3 "$CHECK" --launches --bin "$BIN" --log "$SHARED/proxy.jsonl" "${opts[@]}" "$@" 2>&1)" || rc=$?
  printf '%s\n' "$out" | sed "s/^\(PASS\|FAIL\) \([^:]*\):/\1 \2 ($label):/"
  [ "$rc" = 0 ] || FAILED=1
}

# Whether $A can run (node, the binary, the agent); else its SKIPPED/FAIL line.
ready() {
  local var
  case "$A" in
    claude-code) var=CLAUDE_PKG ;; codex) var=CODEX_PKG ;; gemini-cli) var=GEMINI_PKG ;;
    qwen-code) var=QWEN_PKG ;; opencode) var=OPENCODE_PKG ;;
    *) echo "FAIL $A: unknown agent"; FAILED=1; return 1 ;;
  esac
  if ! command -v node >/dev/null; then skip_or_fail "no node on PATH"; return 1; fi
  if [ ! -x "$BIN" ]; then skip_or_fail "no cacheline binary at $BIN"; return 1; fi
  if ! install_agent "$A" "$(pin "$var")"; then
    skip_or_fail "$(pin "$var") is not installed in $CACHE/$A (PROXY_AGENTS_INSTALL=1 installs it)"; return 1
  fi
}

STATE_ARGS=()
per_launch_main() { # mode agents...
  local mode=$1; shift
  local -a agents=("$@") dirs=()
  [ ${#agents[@]} -gt 0 ] || agents=(claude-code codex gemini-cli qwen-code opencode)
  FAILED=0
  mkdir -p "$WORK"
  log "work dir $WORK"
  case "$mode" in
    --per-launch)
      SHARED="$WORK/shared"; mkdir -p "$SHARED"
      for A in "${agents[@]}"; do
        ready || continue
        agent_launches "$WORK/per-launch"
        dirs+=("$AW")
      done
      [ ${#dirs[@]} -eq 0 ] || check_launches per-launch -- "${dirs[@]}" ;;
    --concurrent)
      [ ${#agents[@]} -eq 2 ] || { echo "FAIL --concurrent: two agents, not ${#agents[@]}"; return 1; }
      SHARED="$WORK/concurrent"; mkdir -p "$SHARED"
      local -a pids=()
      for A in "${agents[@]}"; do ready || return "$FAILED"; done
      for A in "${agents[@]}"; do
        agent_launches "$WORK/concurrent" &
        pids+=($!)
        dirs+=("$WORK/concurrent/$A")
      done
      wait "${pids[@]}"
      check_launches concurrent -- "${dirs[@]}" ;;
    --damaged)
      [ ${#agents[@]} -eq 1 ] || { echo "FAIL --damaged: one agent, not ${#agents[@]}"; return 1; }
      A=${agents[0]}
      ready || return "$FAILED"
      SHARED="$WORK/torn"; mkdir -p "$SHARED"
      BETWEEN_TURNS=torn_tail agent_launches "$SHARED"
      check_launches torn-state --warned 2 "has a damaged entry" -- "$AW"
      SHARED="$WORK/other-version"; mkdir -p "$SHARED"
      BETWEEN_TURNS=other_version agent_launches "$SHARED"
      check_launches other-version --warned 2 "was written by another version" --set-aside 2 -- "$AW"
      # The least cap, 4 KiB (an agent's entry is larger than half of it): from the second
      # request on, each append compacts the journal and drops the session's older entry
      # (the latest is appended after), so every launch says so, once.
      SHARED="$WORK/full"; mkdir -p "$SHARED"
      STATE_ARGS=(--state-max-bytes 4096)
      agent_launches "$SHARED"
      check_launches full-state --warned-each "reached its cap" -- "$AW"
      STATE_ARGS=() ;;
  esac
  return "$FAILED"
}

# ---------------------------------------------------------------- main
case "${1:-}" in
  --per-launch | --concurrent | --damaged)
    per_launch_main "$@"; exit $? ;;
esac
if [ "${1:-}" = --install ]; then # CI: the pinned agents into the cache, ripgrep for opencode
  sudo_cmd=(); [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  command -v rg >/dev/null || { "${sudo_cmd[@]}" apt-get update -qq &&
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ripgrep; } >&2 || exit 1
  for A in claude-code:CLAUDE_PKG codex:CODEX_PKG gemini-cli:GEMINI_PKG qwen-code:QWEN_PKG opencode:OPENCODE_PKG; do
    PROXY_AGENTS_INSTALL=1 install_agent "${A%%:*}" "$(pin "${A#*:}")" || exit 1
  done
  exit 0
fi
AGENTS=("$@")
[ ${#AGENTS[@]} -gt 0 ] || AGENTS=(claude-code codex gemini-cli qwen-code opencode)
FAILED=0
mkdir -p "$WORK"
log "work dir $WORK"
for A in "${AGENTS[@]}"; do
  case "$A" in
    claude-code) var=CLAUDE_PKG ;; codex) var=CODEX_PKG ;; gemini-cli) var=GEMINI_PKG ;;
    qwen-code) var=QWEN_PKG ;; opencode) var=OPENCODE_PKG ;;
    *) echo "FAIL $A: unknown agent"; FAILED=1; continue ;;
  esac
  if ! command -v node >/dev/null; then skip_or_fail "no node on PATH"; continue; fi
  if [ ! -x "$BIN" ]; then skip_or_fail "no cacheline binary at $BIN"; continue; fi
  if ! install_agent "$A" "$(pin "$var")"; then
    skip_or_fail "$(pin "$var") is not installed in $CACHE/$A (PROXY_AGENTS_INSTALL=1 installs it)"; continue
  fi
  setup_dirs
  "agent_${A//-/_}"
  stop_upstream
  check
done
exit "$FAILED"
