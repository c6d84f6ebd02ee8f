#!/usr/bin/env python3
"""Check an agent's own session store against the upstream's replies.

Usage: check_stores.py FIXTURE_DIR [FIXTURE_DIR ...]

FIXTURE_DIR is tests/fixtures/import/<agent>-<version>/ (a `home/` copied by
scripts/agents/copy_stores.py and the `capture.jsonl` of the same run).  For
every request of the capture it takes the usage the scripted upstream sent
back (the ground truth: whole prompt tokens, cache read, cache write, output)
and finds the store's record of that request:

* claude-code: `assistant` records, by `message.id` (= the reply's id; one
  record per content block, so deduplicated by id);
* codex: `token_usage_record` records, by `payload.response_id`;
* gemini-cli: `gemini` message records (the last version of each `id`) of
  the session file, in order (the store keeps no reply id);
* qwen-code: `assistant` records, by the `response_id` of the
  `ui_telemetry` `qwen-code.api_response` record just before each one;
* opencode: `message` rows with `data.role = "assistant"`, in `time_created`
  order (no reply id).

Prints one line per request: the capture line, the upstream's usage, the
store's, and `ok` / `DIFF` / `not in store`.  Whole prompt = input + cache
read + cache write for Anthropic-style usage (Claude Code, opencode), the
reported prompt/input total for the others.

Python 3.11 standard library only.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path


def upstream_usage(rec: dict) -> dict | None:
    """(id, prompt, cache_read, cache_write, output) from a capture line's response."""
    resp = rec.get("response")
    docs = []
    if isinstance(resp, dict):
        docs.append(resp)
    elif isinstance(resp, str):
        for line in resp.splitlines():
            if line.startswith("data:"):
                try:
                    docs.append(json.loads(line[5:].strip()))
                except json.JSONDecodeError:
                    pass
    out = {"id": None, "prompt": None, "cache_read": 0, "cache_write": 0, "output": None}
    for d in docs:
        if not isinstance(d, dict):
            continue
        if d.get("type") == "message_start":  # Anthropic stream
            m = d["message"]
            u = m["usage"]
            out["id"] = m["id"]
            out["cache_read"] = u.get("cache_read_input_tokens", 0)
            out["cache_write"] = u.get("cache_creation_input_tokens", 0)
            out["prompt"] = u["input_tokens"] + out["cache_read"] + out["cache_write"]
        elif d.get("type") == "message_delta":
            out["output"] = d["usage"]["output_tokens"]
        elif d.get("type") == "message" and "usage" in d:  # Anthropic whole reply
            u = d["usage"]
            out["id"] = d["id"]
            out["cache_read"] = u.get("cache_read_input_tokens", 0)
            out["cache_write"] = u.get("cache_creation_input_tokens", 0)
            out["prompt"] = u["input_tokens"] + out["cache_read"] + out["cache_write"]
            out["output"] = u["output_tokens"]
        elif d.get("type") == "response.completed":  # OpenAI Responses
            r = d["response"]
            u = r["usage"]
            out["id"] = r["id"]
            out["prompt"] = u["input_tokens"]
            out["cache_read"] = u.get("input_tokens_details", {}).get("cached_tokens", 0)
            out["output"] = u["output_tokens"]
        elif d.get("object", "").startswith("chat.completion"):
            out["id"] = d["id"]
            if d.get("usage"):
                u = d["usage"]
                out["prompt"] = u["prompt_tokens"]
                out["cache_read"] = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                out["output"] = u["completion_tokens"]
        elif "usageMetadata" in d:  # Gemini
            u = d["usageMetadata"]
            out["id"] = d.get("responseId")
            out["prompt"] = u["promptTokenCount"]
            out["cache_read"] = u.get("cachedContentTokenCount", 0)
            out["output"] = u.get("candidatesTokenCount", 0)
    return out if out["prompt"] is not None else None


def jsonl(path: Path) -> list[dict]:
    return [json.loads(l) for l in path.read_text(encoding="utf-8").splitlines() if l.strip()]


def store_claude(home: Path) -> tuple[dict, list]:
    by_id = {}
    for f in sorted(home.glob(".claude/projects/*/*.jsonl")):
        for r in jsonl(f):
            if r.get("type") != "assistant":
                continue
            m = r["message"]
            u = m.get("usage") or {}
            cr, cw = u.get("cache_read_input_tokens", 0), u.get("cache_creation_input_tokens", 0)
            by_id.setdefault(m["id"], {
                "prompt": u.get("input_tokens", 0) + cr + cw, "cache_read": cr, "cache_write": cw,
                "output": u.get("output_tokens"), "model": m.get("model"), "time": r.get("timestamp"),
                "session": r.get("sessionId")})
    return by_id, []


def store_codex(home: Path) -> tuple[dict, list]:
    by_id = {}
    for f in sorted(home.glob(".codex/sessions/**/rollout-*.jsonl")):
        for r in jsonl(f):
            if r.get("type") != "token_usage_record":
                continue
            p = r["payload"]
            u = p["usage"]
            by_id[p["response_id"]] = {
                "prompt": u["input_tokens"], "cache_read": u.get("cached_input_tokens", 0),
                "cache_write": u.get("cache_write_input_tokens", 0), "output": u["output_tokens"],
                "time": r.get("timestamp"), "session": p.get("session_id")}
    return by_id, []


def store_gemini(home: Path) -> tuple[dict, list]:
    # The session file is the one holding model replies; later resumes start a
    # new file that keeps only its header and first $set (see the note).
    ordered = []
    for f in sorted(home.glob(".gemini/tmp/*/chats/*")):
        latest: dict[str, dict] = {}
        order: list[str] = []
        for r in jsonl(f):
            if r.get("type") == "gemini":
                if r["id"] not in latest:
                    order.append(r["id"])
                latest[r["id"]] = r
        for i in order:
            r = latest[i]
            t = r.get("tokens") or {}
            ordered.append({"prompt": t.get("input"), "cache_read": t.get("cached", 0), "cache_write": 0,
                            "output": t.get("output"), "model": r.get("model"), "time": r.get("timestamp"),
                            "file": f.name})
    return {}, ordered


def store_qwen(home: Path) -> tuple[dict, list]:
    by_id = {}
    for f in sorted(home.glob(".qwen/projects/*/chats/*.jsonl")):
        last_resp = None
        for r in jsonl(f):
            if r.get("type") == "system" and r.get("subtype") == "ui_telemetry":
                ev = r["systemPayload"]["uiEvent"]
                if ev.get("event.name") == "qwen-code.api_response":
                    last_resp = ev.get("response_id")
            elif r.get("type") == "assistant" and "usageMetadata" in r:
                u = r["usageMetadata"]
                by_id[last_resp] = {
                    "prompt": u["promptTokenCount"], "cache_read": u.get("cachedContentTokenCount", 0),
                    "cache_write": 0, "output": u.get("candidatesTokenCount"), "model": r.get("model"),
                    "time": r.get("timestamp"), "session": r.get("sessionId")}
    return by_id, []


def store_opencode(home: Path) -> tuple[dict, list]:
    db = home / ".local/share/opencode/opencode.db"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    ordered = []
    for mid, created, data in con.execute(
            "select id, time_created, data from message order by session_id, time_created, id"):
        d = json.loads(data)
        if d.get("role") != "assistant":
            continue
        t = d["tokens"]
        cr, cw = t["cache"]["read"], t["cache"]["write"]
        ordered.append({"prompt": t["input"] + cr + cw, "cache_read": cr, "cache_write": cw,
                        "output": t["output"], "model": d.get("modelID"), "time": created, "id": mid})
    con.close()
    return {}, ordered


STORES = {"claude-code": store_claude, "codex": store_codex, "gemini-cli": store_gemini,
          "qwen-code": store_qwen, "opencode": store_opencode}


def check(fixture: Path) -> int:
    agent = fixture.name.rsplit("-", 1)[0]
    caps = jsonl(fixture / "capture.jsonl")
    by_id, ordered = STORES[agent](fixture / "home")
    print(f"## {fixture.name}  ({len(caps)} capture lines)")
    bad = 0
    seq = iter(ordered)
    for n, rec in enumerate(caps, 1):
        up = upstream_usage(rec)
        if up is None:
            print(f"  line {n}: {rec['path']}  no usage in the reply (not an LLM request)")
            continue
        body = json.loads(rec["request"]) if rec["request"] else {}
        is_side = agent == "opencode" and not body.get("tools")
        st = None
        if by_id:
            st = by_id.get(up["id"])
        elif not is_side:
            st = next(seq, None)
        want = (up["prompt"], up["cache_read"], up["cache_write"], up["output"])
        if st is None:
            kind = " (title call: no tools)" if is_side else ""
            print(f"  line {n}: {up['id']} upstream {want}  not in store{kind}")
            continue
        got = (st["prompt"], st["cache_read"], st["cache_write"], st["output"])
        verdict = "ok" if got == want else "DIFF"
        bad += verdict != "ok"
        print(f"  line {n}: {up['id']} upstream {want} store {got}  {verdict}")
    if by_id:
        cap_ids = {u["id"] for r in caps if (u := upstream_usage(r))}
        extra = [k for k in by_id if k not in cap_ids]
    else:
        extra = [r.get("id") or r.get("time") for r in seq]
    names = [f"{k} (model {by_id[k].get('model')})" if by_id else str(k) for k in extra]
    print(f"  store records with no request in the capture: {len(extra)}"
          + (" [" + ", ".join(names) + "]" if names else ""))
    return bad


def main() -> int:
    print("(prompt, cache_read, cache_write, output) per request")
    bad = sum(check(Path(a)) for a in sys.argv[1:])
    print("all match" if bad == 0 else f"{bad} request(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
