#!/usr/bin/env bash
# A fleet on one machine: N llama-server replicas behind sglang-router, all on 127.0.0.1,
# everything from PyPI.
#
#   scripts/fleet.sh start N      start N replicas and one router per policy in front of them;
#                                 prints the URL of the router that routes by the library's key
#   scripts/fleet.sh stop         stop exactly what `start` started (its pid files)
#   scripts/fleet.sh status       each replica and router with its URL; exit 1 if one is down
#   scripts/fleet.sh url [POLICY] the URL of POLICY's router (default: manual)
#   scripts/fleet.sh instance N   a private fleet for as long as stdin stays open: starts it (no
#                                 install: fails if sglang-router or llama-server is not cached),
#                                 prints the manual router's URL, waits for end of input (or INT,
#                                 TERM, HUP), stops it. Needs a CACHELINE_FLEET_DIR of its own;
#                                 its logs go there too. The live fleet test runs one per run.
#
# Replicas: scripts/llama-server.sh, each with its own URL and pid file
# ($FLEET/replica-<i>.url), one thread (-t 1), one slot of 8,192 tokens and
# --alias replica-<i>, so every response names the replica that answered.
#
# One slot holds one conversation: llama.cpp gives a request the slot whose prompt shares
# the most with it (more than 10%), and every session of an agent shares its prefix, so extra
# slots do not keep sessions apart; nor did its host-RAM prompt cache (--cache-ram 512, two
# sessions sharing 86% of their prompts took turns on one replica and each re-processed all
# its own tokens; CACHELINE_FLEET_CACHE_RAM sets it, default 0). docs/fleet.md has more.
#
# Routers: sglang-router (pinned below) in a venv under $CACHE/tools, metrics on loopback,
# one per policy in CACHELINE_FLEET_POLICIES (default "manual round_robin cache_aware"):
#   manual        --policy manual --assignment-mode min_load: a request carrying the header
#                 X-SMG-Routing-Key goes where its key was first assigned (the least-loaded
#                 worker then); what `prompt_wire::Wire::routing_header` gives
#   round_robin   each request to the next worker
#   cache_aware   sglang-router's approximate radix tree of what each worker has seen
# Their URLs: $FLEET/router-<policy>.url.
#
# Environment:
#   CACHELINE_CACHE_DIR       cache root (as scripts/llama-server.sh)
#   CACHELINE_FLEET_DIR       the fleet's URL and pid files (default $CACHE/fleet)
#   CACHELINE_FLEET_CACHE_RAM host-RAM prompt cache per replica, MiB (default 0)
#   CACHELINE_FLEET_POLICIES  routers to start (default "manual round_robin cache_aware")
#   CACHELINE_PYTHON          python with venv (default: python3.11, else python3)
set -euo pipefail

SGLANG_ROUTER_VERSION=0.3.2

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LLAMA=$HERE/llama-server.sh
CACHE=${CACHELINE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cacheline}
FLEET=${CACHELINE_FLEET_DIR:-$CACHE/fleet}
LOG_DIR=$CACHE/logs
# Replica and router logs (an instance keeps its own, in its fleet directory).
FLEET_LOGS=$LOG_DIR
VENV=$CACHE/tools/sglang-router-$SGLANG_ROUTER_VERSION
CACHE_RAM=${CACHELINE_FLEET_CACHE_RAM:-0}
POLICIES=${CACHELINE_FLEET_POLICIES:-manual round_robin cache_aware}

SCRIPT_NAME=fleet.sh
# shellcheck source=scripts/common.sh
source "$HERE/common.sh"

install_router() {
    if [[ -f $VENV/.installed ]]; then
        return
    fi
    mkdir -p "$CACHE/tools" "$LOG_DIR"
    local install_log=$LOG_DIR/install-sglang-router-$SGLANG_ROUTER_VERSION.log
    # A venv's scripts name its path: build it in place, mark it done last.
    rm -rf "$VENV"
    log "installing sglang-router $SGLANG_ROUTER_VERSION from PyPI into $VENV (log: $install_log)"
    if ! { "$(python_bin)" -m venv "$VENV" &&
        "$VENV/bin/python" -m pip install --disable-pip-version-check --only-binary :all: \
            "sglang-router==$SGLANG_ROUTER_VERSION"; } >>"$install_log" 2>&1; then
        tail -n 30 "$install_log" >&2 || true
        rm -rf "$VENV"
        die "installing sglang-router failed (log: $install_log)"
    fi
    touch "$VENV/.installed"
}

# The pid in $1 if it names a live process whose command line contains $2 (sglang-router
# retitles itself "sglang::router").
live_pid() {
    [[ -f $1 ]] || return 1
    local pid
    pid=$(cat "$1")
    [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
    local cmdline
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline") || return 1
    grep -qF -- "$2" <<<"$cmdline" || return 1
    echo "$pid"
}

replica_count() {
    local n=0
    while [[ -f $FLEET/replica-$((n + 1)).url || -f $FLEET/replica-$((n + 1)).pid ]]; do
        n=$((n + 1))
    done
    echo "$n"
}

replica_env() { # i: the environment scripts/llama-server.sh runs replica i in
    echo "CACHELINE_LLAMA_URL_FILE=$FLEET/replica-$1.url" \
        "CACHELINE_LLAMA_LOG=$FLEET_LOGS/fleet-replica-$1.log" \
        "CACHELINE_LLAMA_THREADS=1" "CACHELINE_LLAMA_SLOTS=1" \
        "CACHELINE_LLAMA_CACHE_RAM=$CACHE_RAM" "CACHELINE_LLAMA_CTX=8192" "CACHELINE_LLAMA_ALIAS=replica-$1" \
        "CACHELINE_LLAMA_PORT="
}

start_router() { # policy worker-url...
    local policy=$1
    shift
    local pid_file=$FLEET/router-$policy.pid url_file=$FLEET/router-$policy.url
    local router_log=$FLEET_LOGS/fleet-router-$policy.log pid
    if pid=$(live_pid "$pid_file" sglang) && [[ -f $url_file ]] && healthy "$(cat "$url_file")"; then
        log "router $policy already running (pid $pid): $(cat "$url_file")"
        return
    fi
    local port metrics extra=()
    port=$(free_port)
    metrics=$(free_port)
    [[ $policy != manual ]] || extra=(--assignment-mode min_load)
    [[ -f $router_log ]] && mv -f "$router_log" "$router_log.1"
    log "starting sglang-router ($policy) on http://127.0.0.1:$port (log: $router_log)"
    setsid nohup "$VENV/bin/python" -m sglang_router.launch_router \
        --host 127.0.0.1 --port "$port" --worker-urls "$@" --policy "$policy" "${extra[@]}" \
        --prometheus-host 127.0.0.1 --prometheus-port "$metrics" --log-level warn \
        >>"$router_log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$pid_file"
    local waited=0
    while ((waited < 120)); do
        kill -0 "$pid" 2>/dev/null || {
            tail -n 20 "$router_log" >&2 || true
            die "sglang-router ($policy) exited during start-up (log: $router_log)"
        }
        if healthy "http://127.0.0.1:$port" && workers_ready "http://127.0.0.1:$port" "$#"; then
            echo "http://127.0.0.1:$port" >"$url_file"
            log "router $policy ready after ${waited}s: http://127.0.0.1:$port"
            return
        fi
        sleep 1
        waited=$((waited + 1))
    done
    die "sglang-router ($policy) did not become ready within 120 s (log: $router_log)"
}

# Whether the router at $1 lists $2 workers, all healthy.
workers_ready() {
    local listing
    listing=$(curl -fsS --max-time 2 "$1/workers" 2>/dev/null) || return 1
    "$(python_bin)" - "$2" "$listing" <<'PY'
import json, sys
want, text = int(sys.argv[1]), sys.argv[2]
data = json.loads(text)
workers = data.get("workers", data) if isinstance(data, dict) else data
healthy = [w for w in workers if not isinstance(w, dict) or w.get("is_healthy", True)]
sys.exit(0 if len(workers) == want and len(healthy) == want else 1)
PY
}

cmd_start() {
    local n=${1:-}
    [[ $n =~ ^[1-9][0-9]?$ ]] || die "usage: $0 start N (N replicas, 1-99)"
    command -v curl >/dev/null || die "curl is needed"
    mkdir -p "$FLEET" "$LOG_DIR" "$FLEET_LOGS"
    local running
    running=$(replica_count)
    if ((running > n)); then
        die "a fleet of $running replicas is running: stop it first"
    fi
    install_router
    "$LLAMA" install
    local i urls=()
    for ((i = 1; i <= n; i++)); do
        # shellcheck disable=SC2046
        env $(replica_env "$i") "$LLAMA" start >/dev/null
        urls+=("$(cat "$FLEET/replica-$i.url")")
    done
    local policy
    for policy in $POLICIES; do
        start_router "$policy" "${urls[@]}"
    done
    log "fleet: $n replicas (${urls[*]}); routers: $POLICIES"
    cat "$FLEET/router-manual.url" 2>/dev/null || cat "$FLEET/router-${POLICIES%% *}.url"
}

cmd_stop() {
    local f pid
    for f in "$FLEET"/router-*.pid; do
        [[ -e $f ]] || continue
        if pid=$(live_pid "$f" sglang); then
            log "stopping router $(basename "$f" .pid) (pid $pid)"
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$f" "${f%.pid}.url"
    done
    local n i
    n=$(replica_count)
    for ((i = 1; i <= n; i++)); do
        # shellcheck disable=SC2046
        env $(replica_env "$i") "$LLAMA" stop
    done
}

# A private fleet tied to stdin, as `scripts/llama-server.sh instance` is to its server.
cmd_instance() {
    [[ -n ${CACHELINE_FLEET_DIR:-} ]] ||
        die "instance needs a fleet directory of its own (CACHELINE_FLEET_DIR), not the shared one"
    [[ -f $VENV/.installed ]] || die "sglang-router is not installed at $VENV (run scripts/fleet.sh start N once)"
    "$LLAMA" installed
    FLEET_LOGS=$FLEET/logs
    trap 'cmd_stop; exit 1' INT TERM HUP
    cmd_start "${1:-}"
    # The caller's end of stdin closes when it exits; anything it writes is ignored.
    while read -r _; do :; done || true
    cmd_stop
}

cmd_status() {
    local ok=0 n i f
    n=$(replica_count)
    ((n > 0)) || {
        echo "no fleet"
        return 1
    }
    for ((i = 1; i <= n; i++)); do
        # shellcheck disable=SC2046
        printf 'replica-%s: %s\n' "$i" "$(env $(replica_env "$i") "$LLAMA" status || true)"
        # shellcheck disable=SC2046
        env $(replica_env "$i") "$LLAMA" status >/dev/null || ok=1
    done
    for f in "$FLEET"/router-*.url; do
        [[ -e $f ]] || continue
        local name
        name=$(basename "$f" .url)
        if live_pid "${f%.url}.pid" sglang >/dev/null && healthy "$(cat "$f")"; then
            echo "$name: running: $(cat "$f")"
        else
            echo "$name: down"
            ok=1
        fi
    done
    return $ok
}

case ${1:-} in
start) cmd_start "${2:-}" ;;
stop) cmd_stop ;;
status) cmd_status ;;
url) cat "$FLEET/router-${2:-manual}.url" ;;
instance) cmd_instance "${2:-}" ;;
*)
    echo "usage: $0 start N|stop|status|url [POLICY]|instance N" >&2
    exit 2
    ;;
esac
