#!/usr/bin/env bash
# The proxy benchmark of issues 24 and 34, side by side in one run: the scripted upstream driven
# directly, through `cacheline proxy`, through LiteLLM's proxy (pass-through routes), through
# NeMo Relay's gateway and through haproxy (HTTP mode: what one hop of a mature C proxy costs
# on the machine, the floor for the others), whole and streamed, at 10, 100 and 1,000
# requests/s, each run repeated (contenders interleaved, so a repeat's runs are back to back); then the resident memory of
# each proxy with 10,000 idle sessions. Sessions send what agents send: Claude Code's and Qwen
# Code's captured first requests (tests/fixtures/agents, ~100 KB), a session header each.
# `cacheline proxy`'s own /metrics gives its analysis CPU per request. Writes a Markdown table
# (docs/benchmarks.md, "The proxy, side by side", has one and this command).
#
#   scripts/bench-proxy.sh [--quick] [--synthetic] [--repeats N] [--only LABELS] [--out DIR]
#
#   --quick      1 s per rate, 1 repeat and 500 idle sessions: a check that every contender
#                forwards, not a measurement
#   --synthetic  the small synthetic bodies (~1-8 KB, no session header) of the first runs
#   --repeats    repeats of every latency run (default 3)
#   --only       the contenders to run, comma-separated (cacheline, litellm, nemo-relay,
#                haproxy; the direct run always): e.g. --only cacheline,haproxy
#   --out        where results.jsonl, table.md and the contenders' logs go (default
#                target/bench-proxy)
#
# Not part of .ci/run. haproxy is Debian's package (.ci/run installs it; without it, it is
# skipped and said so). LiteLLM and NeMo Relay come from PyPI (pinned below) into a venv cached
# in $CACHELINE_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/cacheline)/bench-proxy-venv-*;
# nothing is downloaded at run time after that. All processes bind loopback ports and are
# stopped on exit. On a machine with 2+ cores the driver is pinned to CPU 0 and the upstream
# and the proxy under test to CPU 1 (taskset), so the proxy competes with the upstream, not
# with the driver.
set -euo pipefail
cd "$(dirname "$0")/.."
SCRIPT_NAME=bench-proxy
# shellcheck source=scripts/common.sh
source scripts/common.sh

LITELLM_VERSION=1.108.7
NEMO_RELAY_VERSION=0.10.4

quick=0
synthetic=0
repeats=3
only=
out=target/bench-proxy
while [[ $# -gt 0 ]]; do
    case $1 in
        --quick) quick=1 ;;
        --synthetic) synthetic=1 ;;
        --repeats) repeats=$2; shift ;;
        --only) only=$2; shift ;;
        --out) out=$2; shift ;;
        *) die "unknown argument $1 (see the header of $0)" ;;
    esac
    shift
done
rates=(10 100 1000)
# wanted LABEL: whether --only left that contender in.
wanted() { [[ -z $only || ,$only, == *,"$1",* ]]; }
for label in ${only//,/ }; do
    case $label in
        cacheline | litellm | nemo-relay | haproxy) ;;
        *) die "--only: no contender $label (cacheline, litellm, nemo-relay, haproxy)" ;;
    esac
done
if ((quick)); then
    declare -A secs=([10]=1 [100]=1 [1000]=1)
    idle_sessions=500
    repeats=1
else
    # Per repeat 300 requests at 10/s, 1,000 at 100/s, 3,000 at 1,000/s: a p99 is the 3rd,
    # 10th and 30th slowest, and the repeats give its spread.
    declare -A secs=([10]=30 [100]=10 [1000]=3)
    idle_sessions=10000
fi
bodies=()
((synthetic)) || bodies=(--agent-bodies "$PWD/tests/fixtures/agents")
mkdir -p "$out"
out=$(cd "$out" && pwd)
results=$out/results.jsonl
: >"$results"

cache=${CACHELINE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cacheline}
venv=$cache/bench-proxy-venv-litellm$LITELLM_VERSION-nemo$NEMO_RELAY_VERSION
if { wanted litellm || wanted nemo-relay; } && [[ ! -x $venv/bin/litellm || ! -x $venv/bin/nemo-relay ]]; then
    log "installing litellm[proxy]==$LITELLM_VERSION and nemo-relay-cli-bin==$NEMO_RELAY_VERSION into $venv"
    rm -rf "$venv"
    "$(python_bin)" -m venv "$venv"
    "$venv/bin/pip" install -q "litellm[proxy]==$LITELLM_VERSION" "nemo-relay-cli-bin==$NEMO_RELAY_VERSION" >&2
fi

log "building proxy-bench and cacheline (release)"
# Two builds: `--bin proxy-bench` would also filter cacheline-cli's binaries out of one.
cargo build -q --release -p cacheline-benches --bin proxy-bench
cargo build -q --release -p cacheline-cli --bin cacheline
target_dir=$(cargo metadata -q --format-version 1 --no-deps | "$(python_bin)" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
bench=$target_dir/release/proxy-bench
cacheline=$target_dir/release/cacheline

pin_driver=() pin_server=()
if command -v taskset >/dev/null && (($(nproc) >= 2)); then
    pin_driver=(taskset -c 0) pin_server=(taskset -c 1)
fi

pids=()
# SIGTERM, then SIGKILL for whatever still runs 5 s later (`cacheline proxy` as of ab82d7f
# outlives SIGTERM, and a background job ignores SIGINT).
cleanup() {
    local pid i
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for ((i = 0; i < 10; i++)); do
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && break; done
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

# wait_for NAME URL PID: until URL answers (any status), the process died, or 90 s passed.
wait_for() {
    local i
    for ((i = 0; i < 180; i++)); do
        curl -s -o /dev/null --max-time 1 "$2" && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.5
    done
    return 1
}

skip() { # skip LABEL LOGFILE WHAT
    local reason
    reason="$3: $(tail -c 400 "$2" 2>/dev/null | tr -s '\n\r|' '   ')"
    log "$1 not measured: $reason"
    "$bench" skip --label "$1" --reason "$reason" --out "$results"
}

up_port=$(free_port)
"${pin_server[@]}" "$bench" upstream --listen "127.0.0.1:$up_port" >"$out/upstream.log" 2>&1 &
p=$!
pids+=("$p")
upstream=http://127.0.0.1:$up_port
wait_for upstream "$upstream/" "$p" || die "the scripted upstream did not start: $(cat "$out/upstream.log")"

# Contenders: label -> base URL, paths and header when not the upstream's own, pid.
declare -A base oapath anpath header pid metrics
labels=(direct)
base[direct]=$upstream

# As an agent's user runs it: a log, and sessions carried across launches (in a state
# directory of this run's own, so an earlier run's sessions are not restored into it).
if wanted cacheline; then
port=$(free_port)
rm -rf "$out/cacheline-state" "$out/cacheline-proxy.jsonl"
"${pin_server[@]}" "$cacheline" proxy --listen "127.0.0.1:$port" --upstream "openai=$upstream" \
    --upstream "anthropic=$upstream" --log "$out/cacheline-proxy.jsonl" \
    --state "$out/cacheline-state" >"$out/cacheline.log" 2>&1 &
p=$!
pids+=("$p")
if wait_for cacheline "http://127.0.0.1:$port/" "$p"; then
    labels+=(cacheline) base[cacheline]=http://127.0.0.1:$port pid[cacheline]=$p
    metrics[cacheline]=http://127.0.0.1:$port/metrics
else
    skip cacheline "$out/cacheline.log" "cacheline proxy did not start"
fi
fi

# LiteLLM: two generic pass-through endpoints (general_settings.pass_through_endpoints), the
# sub-path kept, to the same upstream. It refuses to start without a master key, and then asks
# for it on pass-through routes too.
if wanted litellm; then
port=$(free_port)
master_key=sk-bench-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
cat >"$out/litellm.yaml" <<EOF
model_list: []
general_settings:
  pass_through_endpoints:
    - path: "/bench-openai"
      target: "$upstream"
      include_subpath: true
    - path: "/bench-anthropic"
      target: "$upstream"
      include_subpath: true
litellm_settings:
  telemetry: false
EOF
LITELLM_MASTER_KEY=$master_key LITELLM_LOCAL_MODEL_COST_MAP=True \
    "${pin_server[@]}" "$venv/bin/litellm" --config "$out/litellm.yaml" --host 127.0.0.1 --port "$port" \
    >"$out/litellm.log" 2>&1 &
p=$!
pids+=("$p")
if wait_for litellm "http://127.0.0.1:$port/health/liveliness" "$p"; then
    labels+=(litellm) base[litellm]=http://127.0.0.1:$port pid[litellm]=$p
    oapath[litellm]=/bench-openai/v1/chat/completions anpath[litellm]=/bench-anthropic/v1/messages
    header[litellm]="authorization: Bearer $master_key"
else
    skip litellm "$out/litellm.log" "litellm did not start"
fi
fi

# NeMo Relay: a bare invocation runs its gateway; base URLs as its --help says (OpenAI's with
# /v1). Its config and state go to a HOME of its own under --out.
if wanted nemo-relay; then
port=$(free_port)
mkdir -p "$out/nemo-home"
HOME=$out/nemo-home XDG_CONFIG_HOME=$out/nemo-home/.config XDG_STATE_HOME=$out/nemo-home/.state \
    "${pin_server[@]}" "$venv/bin/nemo-relay" --bind "127.0.0.1:$port" \
    --openai-base-url "$upstream/v1" --anthropic-base-url "$upstream" >"$out/nemo-relay.log" 2>&1 &
p=$!
pids+=("$p")
if wait_for nemo-relay "http://127.0.0.1:$port/" "$p"; then
    labels+=(nemo-relay) base[nemo-relay]=http://127.0.0.1:$port pid[nemo-relay]=$p
else
    skip nemo-relay "$out/nemo-relay.log" "nemo-relay did not start"
fi
fi

# haproxy in HTTP mode (it parses and re-writes each request and reply, as the others do), one
# thread, connections to the upstream kept and reused: the cost of one hop of a mature proxy
# written in C on this machine, the floor any of the others stands on. No state, no log.
if wanted haproxy; then
    if command -v haproxy >/dev/null; then
        port=$(free_port)
        cat >"$out/haproxy.cfg" <<EOF
global
    nbthread 1
    maxconn 4096
defaults
    mode http
    timeout connect 10s
    timeout client 120s
    timeout server 600s
    option http-keep-alive
frontend bench
    bind 127.0.0.1:$port
    default_backend upstream
backend upstream
    http-reuse always
    server upstream 127.0.0.1:$up_port
EOF
        "${pin_server[@]}" haproxy -f "$out/haproxy.cfg" >"$out/haproxy.log" 2>&1 &
        p=$!
        pids+=("$p")
        if wait_for haproxy "http://127.0.0.1:$port/" "$p"; then
            labels+=(haproxy) base[haproxy]=http://127.0.0.1:$port pid[haproxy]=$p
        else
            skip haproxy "$out/haproxy.log" "haproxy did not start"
        fi
    else
        "$bench" skip --label haproxy --reason "haproxy is not installed (Debian: apt-get install haproxy)" --out "$results"
    fi
fi

# run_driver LABEL SUBCOMMAND ARGS...: proxy-bench against one contender.
run_driver() {
    local label=$1 sub=$2
    shift 2
    local -a t=(--label "$label" --target "${base[$label]}" --out "$results")
    [[ -n ${oapath[$label]:-} ]] && t+=(--openai-path "${oapath[$label]}")
    [[ -n ${anpath[$label]:-} ]] && t+=(--anthropic-path "${anpath[$label]}")
    [[ -n ${header[$label]:-} ]] && t+=(--header "${header[$label]}")
    [[ -n ${metrics[$label]:-} ]] && t+=(--metrics "${metrics[$label]}")
    "${pin_driver[@]}" "$bench" "$sub" "${t[@]}" "${bodies[@]}" "$@"
}

# Memory first, on fresh proxies: each session sends one request, then stays idle. At most
# 300 sessions a second, 4 at once: `cacheline proxy` analyses each exchange after forwarding
# it, and a session whose exchange the analysis dropped (its queue full) would hold nothing.
# 100 sessions of their own first, before memory is read: what a proxy holds whatever the
# number of sessions (`cacheline proxy`: the 64 bodies its engine keeps for excerpts, ~6 MB
# with these bodies) is not counted per session.
for label in "${labels[@]}"; do
    [[ $label == direct ]] && continue
    log "$label: $idle_sessions idle sessions"
    run_driver "$label" idle --pid "${pid[$label]}" --sessions "$idle_sessions" \
        --concurrency 4 --rate 300 --warm-up 100 ||
        "$bench" skip --label "$label" --reason "idle run failed" --out "$results"
done

# Latency: each repeat runs each rate and mode on every contender back to back (direct first).
for ((repeat = 0; repeat < repeats; repeat++)); do
    for mode in whole stream; do
        for rate in "${rates[@]}"; do
            for label in "${labels[@]}"; do
                log "repeat $((repeat + 1))/$repeats, $label: $mode at $rate/s for ${secs[$rate]} s"
                flag=()
                [[ $mode == stream ]] && flag=(--stream)
                run_driver "$label" load --rate "$rate" --secs "${secs[$rate]}" --repeat "$repeat" \
                    "${flag[@]}" 2>>"$out/driver.log" ||
                    "$bench" skip --label "$label" --reason "$mode run at $rate/s failed (see driver.log)" --out "$results"
            done
        done
    done
done

{
    echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')), $(uname -sr)."
    # What each contender run is, in the order run.
    described=()
    for label in "${labels[@]}"; do
        case $label in
            cacheline) described+=("cacheline $(git describe --always --dirty 2>/dev/null || echo '?') (release build)") ;;
            litellm) described+=("LiteLLM $("$venv/bin/pip" show litellm 2>/dev/null | sed -n 's/^Version: //p') (pass-through endpoints)") ;;
            nemo-relay) described+=("NeMo Relay $("$venv/bin/pip" show nemo-relay-cli-bin 2>/dev/null | sed -n 's/^Version: //p') (gateway)") ;;
            haproxy) described+=("$(haproxy -v 2>/dev/null | sed -n '1s/ - .*//p') (HTTP mode)") ;;
        esac
    done
    contenders=direct
    for d in "${described[@]}"; do contenders+=", $d"; done
    echo "Contenders: $contenders."
    if ((synthetic)); then
        echo "Bodies: synthetic (~1-8 KB, no session header)."
    else
        echo "Bodies: Claude Code's and Qwen Code's first captured requests (tests/fixtures/agents), a session header each; $repeats repeats."
    fi
    if ((${#pin_driver[@]})); then
        echo "Pinned: driver on CPU 0; upstream and proxies on CPU 1."
    else
        echo "Not pinned (no taskset or fewer than 2 cores)."
    fi
    echo
    "$bench" table "$results"
} >"$out/table.md"
cat "$out/table.md"
