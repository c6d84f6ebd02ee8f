# Helpers shared by scripts/llama-server.sh and scripts/fleet.sh (sourced; each script
# defines SCRIPT_NAME first).

log() { printf '[%s] %s\n' "$SCRIPT_NAME" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

python_bin() {
    if [[ -n ${CACHELINE_PYTHON:-} ]]; then
        echo "$CACHELINE_PYTHON"
    elif command -v python3.11 >/dev/null; then
        echo python3.11
    elif command -v python3 >/dev/null; then
        echo python3
    else
        die "no python3 found (set CACHELINE_PYTHON)"
    fi
}

healthy() { curl -fsS --max-time 2 "$1/health" >/dev/null 2>&1; }

free_port() {
    "$(python_bin)" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
