#!/usr/bin/env python3
"""Scripted offline LLM upstream used to capture coding-agent request traffic.

It plays the provider for four wire APIs on one loopback port:

* Anthropic Messages      POST /v1/messages, POST /v1/messages/count_tokens
* OpenAI Responses        POST /v1/responses
* OpenAI Chat Completions POST /v1/chat/completions, GET /v1/models
* Gemini                  POST /v1beta/models/{model}:generateContent,
                          :streamGenerateContent[?alt=sse], :countTokens

Every reply is scripted, so a run is deterministic:

* the last request item is a fresh user message and the request offers tools
  -> ONE call of a harmless tool the agent really offers (list a directory,
     read a file, or run `ls`/`pwd` through its shell tool; which one is picked
     from the wording of the user prompt, see INTENTS);
* the last item is a tool result -> a short final text;
* no tools (title / summary / classifier side calls) -> a short text, or a
  JSON document that fits the requested response schema.

Usage numbers are a crude deterministic provider cache: input tokens =
len(body)/4; cached tokens = (longest common byte prefix with any earlier
request body on the same path and model)/4, rounded down to a multiple of 128
when >= 1024, else 0.  Anthropic replies report the uncached rest as
`input_tokens` and the cached part as `cache_read_input_tokens`; OpenAI and
Gemini replies report the total with the cached part as a subset.

Every request is appended as one JSON line to --log:
  {"ts", "path", "headers", "request", "response"}
With --raw-log, each body is also appended exactly as it came off the wire
(base64, before decompression) for byte comparisons (scripts/proxy-agents.sh).
`ts` is the upstream's REAL clock (the agent may run under libfaketime).
`request` is the exact body (decompressed when content-encoding says gzip,
deflate or zstd).  Credential headers are written as "[redacted]".

Python 3.11 standard library only (zstd bodies are decoded with the `zstd`
command when it exists).
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import re
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

REDACT_EXACT = {
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "cookie",
    "proxy-authorization",
}
REDACT_PARTS = ("key", "token", "secret", "auth")

# Which user prompt asks for which kind of tool.  Matched against the text of
# the last user message, lower-cased; the first matching phrase wins.
INTENTS = [
    ("list the files", "list"),
    ("read notes.txt", "read"),
    ("run pwd", "shell"),
    ("look up the note", "mcp"),
]

# Tool names (lower-case) preferred for each intent, best first.
SHELL_TOOLS = ["bash", "run_shell_command", "shell", "shell_command", "exec_command", "local_shell"]
PREFERRED = {
    "list": ["ls", "list_directory", "list_dir", "list", "glob"] + SHELL_TOOLS,
    "read": ["read", "read_file", "view", "cat"] + SHELL_TOOLS,
    "shell": SHELL_TOOLS + ["ls", "list_directory", "list_dir", "list", "glob"],
    # An MCP server's tool (scripts/agents/mcp_server.py): Claude Code names them
    # mcp__<server>__<tool>; pick_tool takes the first tool with this prefix.
    "mcp": ["mcp__"],
}
SHELL_COMMAND = {"list": "ls", "read": "cat notes.txt", "shell": "pwd", "mcp": "ls"}

PATH_PROPS = {
    "path", "dir_path", "directory", "dir", "absolute_path", "file_path", "filepath",
    "dirpath", "target_directory", "target_file", "relative_workspace_path", "workdir",
    "cwd", "directory_path",
}


class State:
    """Shared, lock-protected state of the fake provider."""

    def __init__(self, log_path: str, workdir: str):
        self.lock = threading.Lock()
        self.log_path = log_path
        self.workdir = workdir.rstrip("/") or "/"
        self.bodies: dict[tuple[str, str], list[bytes]] = {}
        self.counter = 0
        self.raw_log_path: str | None = None

    def log_raw(self, record: dict) -> None:
        with self.lock:
            with open(self.raw_log_path, "a", encoding="utf-8") as f:  # type: ignore[arg-type]
                f.write(json.dumps(record) + "\n")

    def next_id(self) -> int:
        with self.lock:
            self.counter += 1
            return self.counter

    def usage(self, path: str, model: str, body: bytes) -> tuple[int, int]:
        """(input tokens, cached tokens) for `body`, then remember it."""
        key = (path, model)
        with self.lock:
            best = 0
            for old in self.bodies.get(key, []):
                n = min(len(old), len(body))
                i = 0
                # Compare in chunks first, then byte by byte.
                step = 4096
                while i + step <= n and old[i:i + step] == body[i:i + step]:
                    i += step
                while i < n and old[i] == body[i]:
                    i += 1
                best = max(best, i)
            self.bodies.setdefault(key, []).append(body)
        total = len(body) // 4
        cached = best // 4
        cached = (cached // 128) * 128 if cached >= 1024 else 0
        return total, min(cached, total)

    def log(self, record: dict) -> None:
        line = json.dumps(record, ensure_ascii=False)
        with self.lock:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(line + "\n")


# --------------------------------------------------------------------------
# Scripted decisions


def pick_tool(tools: list[dict], intent: str) -> dict | None:
    """tools: [{"name", "schema"}].  Returns the chosen one or None."""
    if not tools:
        return None
    by_name = {t["name"].lower(): t for t in tools}
    if intent == "mcp":
        return next((t for t in tools if t["name"].lower().startswith("mcp__")), None)
    for name in PREFERRED[intent]:
        if name in by_name:
            return by_name[name]
    return None


def norm_type(schema: dict) -> str:
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "string")
    if t is None:
        if "properties" in schema:
            t = "object"
        elif "enum" in schema:
            return "string"
        else:
            for alt in ("anyOf", "oneOf"):
                if schema.get(alt):
                    return norm_type(schema[alt][0])
            t = "string"
    return str(t).lower()


def fill_schema(schema: dict, prop: str = "", ctx: dict | None = None, depth: int = 0):
    """Build a value that validates against a (simple) JSON schema."""
    ctx = ctx or {}
    if not isinstance(schema, dict) or depth > 6:
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        enum = schema["enum"]
        return "user" if "user" in enum else enum[0]
    t = norm_type(schema)
    p = prop.lower()
    if t == "object":
        out = {}
        props = schema.get("properties") or {}
        for name in schema.get("required") or []:
            out[name] = fill_schema(props.get(name, {}), name, ctx, depth + 1)
        return out
    if t == "array":
        if p in ("command", "cmd", "argv"):
            return ["bash", "-lc", ctx.get("command", "ls")]
        return []
    if t == "boolean":
        return False
    if t in ("integer", "number"):
        lo = schema.get("minimum", 0)
        return int(lo) if t == "integer" else float(lo)
    # strings
    if p in PATH_PROPS:
        return ctx.get("file") if ctx.get("intent") == "read" and "dir" not in p else ctx.get("dir")
    if p in ("command", "cmd", "script"):
        return ctx.get("command", "ls")
    if p == "pattern":
        return "*"
    if p == "description":
        return ctx.get("description", "Inspect the project")
    if p in ("reasoning", "explanation", "reason", "thought"):
        return "Scripted reply from the cacheline capture upstream."
    return "ok"


def tool_args(state: State, tool: dict, intent: str) -> dict:
    ctx = {
        "intent": intent,
        "dir": state.workdir,
        "file": state.workdir + "/notes.txt",
        "command": SHELL_COMMAND[intent],
        "description": {"list": "List files", "read": "Read notes.txt", "shell": "Print working directory",
                        "mcp": "Look up a note"}[intent],
    }
    schema = tool.get("schema") or {}
    args = fill_schema(schema, "", ctx)
    if not isinstance(args, dict):
        args = {}
    props = schema.get("properties") or {}
    lname = tool["name"].lower()
    # A few optional properties that make the call do what the intent says.
    if lname == "glob" and "pattern" in props:
        args["pattern"] = "*"
    if lname in ("ls", "list_directory", "list_dir", "list"):
        for k in props:
            if k.lower() in PATH_PROPS and k not in args:
                args[k] = state.workdir
                break
    if lname in SHELL_TOOLS and "description" in props and "description" not in args:
        args["description"] = ctx["description"]
    return args


def final_text(intent: str) -> str:
    return {
        "list": "The project has a README.md, notes.txt and a src folder.",
        "read": "notes.txt is a short note about the cacheline capture.",
        "shell": "The working directory is the scratch project.",
        "mcp": "The note says the cache breaks when the prompt prefix changes.",
    }.get(intent, "Done.")


def schema_json_text(schema: dict) -> str:
    return json.dumps(fill_schema(schema, "", {"intent": "list", "dir": ".", "file": "."}))


# --------------------------------------------------------------------------
# Request handler


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "cacheline-upstream/1"
    state: State  # set on the class by main()

    def log_message(self, fmt, *args):  # keep stderr quiet
        if os.environ.get("UPSTREAM_VERBOSE"):
            sys.stderr.write("upstream: " + (fmt % args) + "\n")

    # ---- plumbing -------------------------------------------------------

    def read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size_line = self.rfile.readline().strip().split(b";")[0]
                size = int(size_line or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            raw = b"".join(chunks)
        else:
            n = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(n) if n else b""
        self.wire_body = raw
        enc = self.headers.get("content-encoding", "").lower().strip()
        if enc == "gzip":
            raw = gzip.decompress(raw)
        elif enc == "deflate":
            raw = zlib.decompress(raw)
        elif enc in ("zstd", "zst"):
            raw = subprocess.run(["zstd", "-d", "-c"], input=raw, capture_output=True, check=True).stdout
        return raw

    def headers_for_log(self) -> dict:
        out: dict[str, str] = {}
        for name, value in self.headers.items():
            n = name.lower()
            if n in REDACT_EXACT or any(part in n for part in REDACT_PARTS):
                value = "[redacted]"
            out[n] = value if n not in out else out[n] + ", " + value
        return out

    def send(self, status: int, body: bytes, ctype: str, extra: dict | None = None):
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def reply(self, raw: bytes, status: int, response, stream_text: str | None):
        """Send the reply and log it.  `response` is a dict for whole replies."""
        record = {
            "ts": time.time(),
            "path": self.path,
            "headers": self.headers_for_log(),
            "request": raw.decode("utf-8", errors="replace"),
            "response": stream_text if stream_text is not None else response,
        }
        self.state.log(record)
        if self.state.raw_log_path:
            self.state.log_raw({
                "method": self.command,
                "path": self.path,
                "content_encoding": self.headers.get("content-encoding", ""),
                "body_b64": base64.b64encode(getattr(self, "wire_body", b"")).decode(),
            })
        if stream_text is not None:
            self.send(status, stream_text.encode(), "text/event-stream", {"cache-control": "no-cache"})
        else:
            self.send(status, json.dumps(response).encode(), "application/json")

    # ---- dispatch -------------------------------------------------------

    def do_GET(self):
        raw = self.read_body()
        path = urlsplit(self.path).path
        if path.rstrip("/").endswith("/models"):
            data = {"object": "list", "has_more": False,
                    "data": [{"id": m, "object": "model", "created": 0, "owned_by": "cacheline", "type": "model"}
                             for m in self.server.models]}  # type: ignore[attr-defined]
            self.reply(raw, 200, data, None)
        else:
            self.reply(raw, 404, {"error": {"message": "not found", "type": "not_found"}}, None)

    def do_HEAD(self):
        self.do_GET()

    def do_DELETE(self):
        raw = self.read_body()
        self.reply(raw, 404, {"error": {"message": "not found", "type": "not_found"}}, None)

    do_PUT = do_DELETE
    do_PATCH = do_DELETE

    def do_POST(self):
        raw = self.read_body()
        path = urlsplit(self.path).path
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        try:
            if body is None:
                result = (400, {"error": {"message": "body is not JSON"}}, None)
            elif path.endswith("/messages/count_tokens"):
                result = (200, {"input_tokens": len(raw) // 4}, None)
            elif path.endswith("/messages"):
                result = self.api_anthropic(path, raw, body)
            elif path.endswith("/responses"):
                result = self.api_responses(path, raw, body)
            elif path.endswith("/chat/completions"):
                result = self.api_chat(path, raw, body)
            elif ":countTokens" in path:
                result = (200, {"totalTokens": len(raw) // 4}, None)
            elif ":generateContent" in path or ":streamGenerateContent" in path:
                result = self.api_gemini(path, raw, body)
            else:
                result = (404, {"error": {"message": "not found", "type": "not_found"}}, None)
        except Exception as e:  # never hang the agent
            import traceback
            traceback.print_exc()
            result = (500, {"error": {"message": "upstream script error: %s" % e}}, None)
        self.reply(raw, *result)

    # ---- Anthropic Messages --------------------------------------------

    def api_anthropic(self, path, raw, body):
        st = self.state
        model = body.get("model", "")
        total, cached = st.usage(path, model, raw)
        msgs = body.get("messages") or []
        last = msgs[-1] if msgs else {}
        content = last.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        is_result = any(b.get("type") == "tool_result" for b in blocks if isinstance(b, dict))
        # the intent of this conversation = the last user text that names one
        intent = self.conversation_intent(
            [m.get("content") if isinstance(m.get("content"), str) else
             "\n".join(b.get("text", "") for b in m.get("content") or [] if isinstance(b, dict) and b.get("type") == "text")
             for m in msgs if m.get("role") == "user"])
        tools = [{"name": t.get("name", ""), "schema": t.get("input_schema") or {}}
                 for t in body.get("tools") or [] if t.get("name")]
        forced = body.get("tool_choice") or {}
        tool = None
        if forced.get("type") == "tool":
            tool = next((t for t in tools if t["name"] == forced.get("name")), None)
        elif last.get("role") == "user" and not is_result and tools:
            tool = pick_tool(tools, intent)
        n = st.next_id()
        if tool:
            if forced.get("type") == "tool":
                args = fill_schema(tool["schema"], "", {"intent": "list", "dir": st.workdir, "file": st.workdir})
            else:
                args = tool_args(st, tool, intent)
            block = {"type": "tool_use", "id": "toolu_%04d" % n, "name": tool["name"], "input": args}
            stop = "tool_use"
        else:
            reply = final_text(intent) if is_result else "Scripted reply."
            block = {"type": "text", "text": reply}
            stop = "end_turn"
        out_tokens = 12
        usage = {"input_tokens": total - cached, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": cached, "output_tokens": out_tokens}
        msg_id = "msg_%04d" % n
        if not body.get("stream"):
            return 200, {"id": msg_id, "type": "message", "role": "assistant", "model": model,
                         "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage}, None
        ev = []

        def emit(name, data):
            ev.append("event: %s\ndata: %s\n\n" % (name, json.dumps(data)))

        emit("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": dict(usage, output_tokens=1)}})
        if block["type"] == "tool_use":
            emit("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})
            emit("ping", {"type": "ping"})
            emit("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
        else:
            emit("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "text", "text": ""}})
            emit("ping", {"type": "ping"})
            emit("content_block_delta", {"type": "content_block_delta", "index": 0,
                                         "delta": {"type": "text_delta", "text": block["text"]}})
        emit("content_block_stop", {"type": "content_block_stop", "index": 0})
        emit("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": out_tokens}})
        emit("message_stop", {"type": "message_stop"})
        return 200, None, "".join(ev)

    @staticmethod
    def conversation_intent(user_texts: list) -> str:
        for t in reversed(user_texts):
            if isinstance(t, str):
                low = t.lower()
                for phrase, intent in INTENTS:
                    if phrase in low:
                        return intent
        return "list"

    # ---- OpenAI Responses ------------------------------------------------

    def api_responses(self, path, raw, body):
        st = self.state
        model = body.get("model", "")
        total, cached = st.usage(path, model, raw)
        items = body.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        items = items or []

        def item_text(it):
            c = it.get("content")
            if isinstance(c, str):
                return c
            return "\n".join(p.get("text", "") for p in c or [] if isinstance(p, dict))

        last = items[-1] if items else {}
        is_result = last.get("type", "") in ("function_call_output", "custom_tool_call_output",
                                             "local_shell_call_output", "mcp_tool_call_output")
        is_user = (last.get("role") == "user") and not is_result
        user_texts = [item_text(it) for it in items if it.get("role") == "user"]
        intent = self.conversation_intent(user_texts)
        tools = []
        for t in body.get("tools") or []:
            if t.get("type") == "function" and t.get("name"):
                tools.append({"name": t["name"], "schema": t.get("parameters") or {}})
        tool = pick_tool(tools, intent) if is_user and tools else None
        n = st.next_id()
        resp_id = "resp_%04d" % n
        if tool:
            args = json.dumps(tool_args(st, tool, intent))
            item = {"id": "fc_%04d" % n, "type": "function_call", "status": "completed",
                    "arguments": args, "call_id": "call_%04d" % n, "name": tool["name"]}
        else:
            reply = final_text(intent) if is_result else "Scripted reply."
            item = {"id": "msg_%04d" % n, "type": "message", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": reply, "annotations": []}]}
        usage = {"input_tokens": total, "input_tokens_details": {"cached_tokens": cached},
                 "output_tokens": 12, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": total + 12}
        base = {"id": resp_id, "object": "response", "created_at": int(time.time()), "model": model,
                "parallel_tool_calls": body.get("parallel_tool_calls", False), "tool_choice": body.get("tool_choice", "auto"),
                "tools": [], "error": None, "incomplete_details": None, "instructions": None,
                "metadata": {}, "previous_response_id": body.get("previous_response_id")}
        done = dict(base, status="completed", output=[item], usage=usage)
        if not body.get("stream"):
            return 200, done, None
        ev = []
        seq = [0]

        def emit(data):
            data["sequence_number"] = seq[0]
            seq[0] += 1
            ev.append("event: %s\ndata: %s\n\n" % (data["type"], json.dumps(data)))

        emit({"type": "response.created", "response": dict(base, status="in_progress", output=[], usage=None)})
        emit({"type": "response.in_progress", "response": dict(base, status="in_progress", output=[], usage=None)})
        if item["type"] == "function_call":
            emit({"type": "response.output_item.added", "output_index": 0,
                  "item": dict(item, status="in_progress", arguments="")})
            emit({"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": 0,
                  "delta": item["arguments"]})
            emit({"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": 0,
                  "arguments": item["arguments"]})
        else:
            text = item["content"][0]["text"]
            emit({"type": "response.output_item.added", "output_index": 0,
                  "item": dict(item, status="in_progress", content=[])})
            emit({"type": "response.content_part.added", "item_id": item["id"], "output_index": 0,
                  "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})
            emit({"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                  "content_index": 0, "delta": text})
            emit({"type": "response.output_text.done", "item_id": item["id"], "output_index": 0,
                  "content_index": 0, "text": text})
            emit({"type": "response.content_part.done", "item_id": item["id"], "output_index": 0,
                  "content_index": 0, "part": item["content"][0]})
        emit({"type": "response.output_item.done", "output_index": 0, "item": item})
        emit({"type": "response.completed", "response": done})
        return 200, None, "".join(ev)

    # ---- OpenAI Chat Completions ----------------------------------------

    def api_chat(self, path, raw, body):
        st = self.state
        model = body.get("model", "")
        total, cached = st.usage(path, model, raw)
        msgs = body.get("messages") or []
        last = msgs[-1] if msgs else {}

        def msg_text(m):
            c = m.get("content")
            if isinstance(c, str):
                return c
            return "\n".join(p.get("text", "") for p in c or [] if isinstance(p, dict))

        is_result = last.get("role") in ("tool", "function")
        intent = self.conversation_intent([msg_text(m) for m in msgs if m.get("role") == "user"])
        tools = [{"name": t["function"]["name"], "schema": t["function"].get("parameters") or {}}
                 for t in body.get("tools") or [] if t.get("type") == "function" and t.get("function")]
        forced = body.get("tool_choice")
        tool = None
        if isinstance(forced, dict) and forced.get("function"):
            tool = next((t for t in tools if t["name"] == forced["function"].get("name")), None)
        elif last.get("role") == "user" and tools:
            tool = pick_tool(tools, intent)
        n = st.next_id()
        rf = body.get("response_format") or {}
        if tool:
            if isinstance(forced, dict):
                args = fill_schema(tool["schema"], "", {"intent": "list", "dir": st.workdir, "file": st.workdir})
            else:
                args = tool_args(st, tool, intent)
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_%04d" % n, "type": "function",
                "function": {"name": tool["name"], "arguments": json.dumps(args)}}]}
            finish = "tool_calls"
        else:
            if rf.get("type") == "json_schema":
                reply = schema_json_text((rf.get("json_schema") or {}).get("schema") or {})
            elif rf.get("type") == "json_object":
                reply = "{}"
            else:
                reply = final_text(intent) if is_result else "Scripted reply."
            message = {"role": "assistant", "content": reply}
            finish = "stop"
        usage = {"prompt_tokens": total, "completion_tokens": 12, "total_tokens": total + 12,
                 "prompt_tokens_details": {"cached_tokens": cached},
                 "completion_tokens_details": {"reasoning_tokens": 0}}
        cid = "chatcmpl-%04d" % n
        created = int(time.time())
        if not body.get("stream"):
            return 200, {"id": cid, "object": "chat.completion", "created": created, "model": model,
                         "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                         "usage": usage}, None
        chunks = []

        def chunk(choices, **extra):
            d = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                 "choices": choices}
            d.update(extra)
            chunks.append("data: %s\n\n" % json.dumps(d))

        chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        if "tool_calls" in message:
            tc = message["tool_calls"][0]
            chunk([{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": tc["id"], "type": "function",
                    "function": {"name": tc["function"]["name"], "arguments": ""}}]}, "finish_reason": None}])
            chunk([{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {
                "arguments": tc["function"]["arguments"]}}]}, "finish_reason": None}])
        else:
            chunk([{"index": 0, "delta": {"content": message["content"]}, "finish_reason": None}])
        include = (body.get("stream_options") or {}).get("include_usage")
        if include:
            chunk([{"index": 0, "delta": {}, "finish_reason": finish}])
            chunk([], usage=usage)
        else:
            chunk([{"index": 0, "delta": {}, "finish_reason": finish}], usage=usage)
        chunks.append("data: [DONE]\n\n")
        return 200, None, "".join(chunks)

    # ---- Gemini ----------------------------------------------------------

    def api_gemini(self, path, raw, body):
        st = self.state
        m = re.search(r"/models/([^/:]+):", path)
        model = m.group(1) if m else ""
        total, cached = st.usage(path, model, raw)
        contents = body.get("contents") or []
        last = contents[-1] if contents else {}
        parts = last.get("parts") or []
        is_result = any("functionResponse" in p for p in parts if isinstance(p, dict))
        user_texts = ["\n".join(p.get("text", "") for p in c.get("parts") or [] if isinstance(p, dict))
                      for c in contents if c.get("role", "user") == "user"]
        intent = self.conversation_intent(user_texts)
        tools = []
        for t in body.get("tools") or []:
            for fd in t.get("functionDeclarations") or []:
                tools.append({"name": fd.get("name", ""),
                              "schema": fd.get("parametersJsonSchema") or fd.get("parameters") or {}})
        is_user = last.get("role", "user") == "user" and not is_result
        tool = pick_tool(tools, intent) if is_user and tools else None
        gc = body.get("generationConfig") or {}
        if tool:
            part = {"functionCall": {"name": tool["name"], "args": tool_args(st, tool, intent)}}
        elif gc.get("responseMimeType") == "application/json":
            schema = gc.get("responseJsonSchema") or gc.get("responseSchema") or {}
            part = {"text": schema_json_text(schema)}
        else:
            part = {"text": final_text(intent) if is_result else "Scripted reply."}
        n = st.next_id()
        usage = {"promptTokenCount": total, "candidatesTokenCount": 12, "totalTokenCount": total + 12,
                 "cachedContentTokenCount": cached,
                 "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}]}
        if cached:
            usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
        resp = {"candidates": [{"content": {"parts": [part], "role": "model"}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": usage, "modelVersion": model, "responseId": "resp_%04d" % n}
        if ":streamGenerateContent" not in path:
            return 200, resp, None
        if "alt=sse" in self.path:
            return 200, None, "data: %s\r\n\r\n" % json.dumps(resp)
        return 200, [resp], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    ap.add_argument("--log", required=True, help="JSONL file to append every request to")
    ap.add_argument("--workdir", default=os.getcwd(), help="project dir used in tool arguments")
    ap.add_argument("--port-file", help="write the bound port here once listening")
    ap.add_argument("--models", default="", help="comma-separated ids for GET /v1/models")
    ap.add_argument("--raw-log", help="JSONL file to append each request's body to exactly as "
                    "received (base64, before any decompression): {method, path, content_encoding, body_b64}")
    args = ap.parse_args()
    Handler.state = State(args.log, args.workdir)
    Handler.state.raw_log_path = args.raw_log
    srv = ThreadingHTTPServer((args.host, args.port), Handler)
    srv.daemon_threads = True
    srv.models = [m for m in args.models.split(",") if m]  # type: ignore[attr-defined]
    port = srv.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, args.port_file)
    print("upstream listening on http://%s:%d" % (args.host, port), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
