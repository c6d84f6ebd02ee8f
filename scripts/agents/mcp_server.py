#!/usr/bin/env python3
"""A tiny stdio MCP server for capturing an agent's MCP path (scripts/capture-agents.sh).

It speaks JSON-RPC 2.0, one message per line on stdin/stdout (the MCP stdio
transport, https://modelcontextprotocol.io/specification/2025-06-18/basic/transports),
and answers `initialize`, `ping`, `tools/list` and `tools/call`; notifications
(no `id`) are read and not answered; any other method gets error -32601.

Its tool list is chosen by --tools (or the MCP_TOOLS variable): a comma-separated
list of names from TOOLS below, default all of them.  Every tool returns a short
fixed text, so a run is deterministic.

Usage: mcp_server.py [--tools lookup_note,word_count]

Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

SERVER = {"name": "cacheline-capture", "version": "1.0.0"}
PROTOCOL = "2025-06-18"

# name -> (description, input schema, fixed result text)
TOOLS = {
    "lookup_note": (
        "Look up a project note by its key and return its text.",
        {"type": "object", "properties": {"key": {"type": "string", "description": "The note's key"}},
         "required": ["key"]},
        "note: the cache breaks when the prompt prefix changes.",
    ),
    "word_count": (
        "Count the words of a text.",
        {"type": "object", "properties": {"text": {"type": "string", "description": "The text to count"}},
         "required": ["text"]},
        "7 words",
    ),
    "project_status": (
        "Report the status of the current project.",
        {"type": "object", "properties": {}},
        "status: clean, one commit",
    ),
}


def tool_list(names: list[str]) -> list[dict]:
    return [{"name": n, "description": TOOLS[n][0], "inputSchema": TOOLS[n][1]} for n in names]


def handle(msg: dict, names: list[str]) -> dict | None:
    """The reply to one JSON-RPC message, or None for a notification."""
    if "id" not in msg:
        return None
    mid, method, params = msg["id"], msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        version = params.get("protocolVersion") or PROTOCOL
        result = {"protocolVersion": version, "capabilities": {"tools": {"listChanged": False}},
                  "serverInfo": SERVER}
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": tool_list(names)}
    elif method == "tools/call":
        name = params.get("name")
        if name not in names:
            return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": f"unknown tool: {name}"}}
        result = {"content": [{"type": "text", "text": TOOLS[name][2]}], "isError": False}
    else:
        return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": f"method not found: {method}"}}
    return {"jsonrpc": "2.0", "id": mid, "result": result}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tools", default=os.environ.get("MCP_TOOLS", ",".join(TOOLS)))
    args = ap.parse_args()
    names = [n for n in args.tools.split(",") if n]
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        print(f"unknown tools: {unknown}; known: {list(TOOLS)}", file=sys.stderr)
        return 2
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except json.JSONDecodeError as e:
            reply = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": f"parse error: {e}"}}
        else:
            reply = handle(msg, names) if isinstance(msg, dict) else None
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
