#!/usr/bin/env python3
"""Rebuild Claude Code's request bodies from its session store (2.1.332+).

Usage: rebuild_claude_requests.py FIXTURE_DIR [--write OUT.jsonl]

FIXTURE_DIR is tests/fixtures/import/claude-code-<version>/ (home/ + the
capture.jsonl of the same run).  From Claude Code 2.1.332 a session file
(~/.claude/projects/<slug>/<session>.jsonl) holds, beside the transcript,
three record types from which each request sent to the provider can be
rebuilt:

* `api-request-shape` {shapeHash, shape: {system: [blocks], tools: [...]}}:
  the system blocks and tools, written once per distinct shape;
* `api-request-blob` {hash, message: {role, content}}: one wire message,
  written once per distinct message, without cache_control;
* assistant messages get no blob: a tail hash may name the SHA-256 (as
  below) of {"role": "assistant", "content": [...]} built from the
  transcript's `assistant` records with one message.id;
* `api-request` {id, shapeHash, params: {model, betas, max_tokens, thinking,
  context_management, …}, base?, keep, tail: [blob hashes], cacheControl:
  [{path, value}], requestDigest}: one request.  Its messages are the first
  `keep` messages of request `base` (none when absent) followed by the blobs
  named in `tail`; `cacheControl` entries set `cache_control` at `path`
  (["system", i] counts the shape's system blocks, ["messages", i,
  "content", j] the rebuilt messages).

This script rebuilds every `api-request` in file order, checks the hashes
(blob/shape hash = SHA-256 of the object's JSON with keys sorted, no spaces,
non-ASCII unescaped; requestDigest = the same over the params object: the
body keys other than metadata/stream, plus `betas`, with the shape's system
blocks, i.e. without the billing-header block), serialises the body in the
wire's key order and compares it byte for byte with the capture line of the
same request (the capture line whose reply has the `message.id` of the
assistant record whose `requestRef` is the request's id).  It prints, per
request, every field that differs.

Python 3.11 standard library only.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path

WIRE_ORDER = ["model", "messages", "system", "tools", "metadata", "max_tokens", "thinking",
              "context_management", "stream"]
DIGEST_SKIP = {"metadata", "stream", "thread", "diagnostics", "safeguards", "data_flow"}


def canon(o) -> str:
    return json.dumps(o, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha(o) -> str:
    return hashlib.sha256(canon(o).encode("utf-8")).hexdigest()


def wire(o) -> str:
    return json.dumps(o, separators=(",", ":"), ensure_ascii=False)


def set_path(body: dict, path: list, value) -> None:
    node = body
    for p in path:
        node = node[p]
    node["cache_control"] = value


def first_diff(a, b, path="$"):
    if type(a) is not type(b):
        return [f"{path}: type {type(a).__name__} -> {type(b).__name__}"]
    if isinstance(a, dict):
        out = []
        if list(a) != list(b) and set(a) == set(b):
            out.append(f"{path}: key order {list(a)} vs {list(b)}")
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a:
                out.append(f"{path}.{k}: only in the capture: {wire(b[k])[:160]}")
            elif k not in b:
                out.append(f"{path}.{k}: only in the rebuild: {wire(a[k])[:160]}")
            elif wire(a[k]) != wire(b[k]):
                out += first_diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} elements"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            if wire(x) != wire(y):
                out += first_diff(x, y, f"{path}[{i}]")
        return out
    if a != b:
        return [f"{path}: rebuild {json.dumps(a, ensure_ascii=False)[:160]} vs capture {json.dumps(b, ensure_ascii=False)[:160]}"]
    return []


def main() -> int:
    fixture = Path(sys.argv[1])
    out_path = Path(sys.argv[sys.argv.index("--write") + 1]) if "--write" in sys.argv else None
    files = sorted(fixture.glob("home/.claude/projects/*/*.jsonl"))
    records = [json.loads(l) for f in files for l in f.read_text(encoding="utf-8").splitlines() if l.strip()]
    shapes, blobs, requests, ref_to_msg = {}, {}, [], {}
    bad_hash = 0
    for r in records:
        t = r.get("type")
        if t == "api-request-shape":
            shapes[r["shapeHash"]] = r["shape"]
            bad_hash += sha(r["shape"]) != r["shapeHash"]
        elif t == "api-request-blob":
            blobs[r["hash"]] = r["message"]
            bad_hash += sha(r["message"]) != r["hash"]
        elif t == "api-request":
            requests.append(r)
        elif t == "assistant" and r.get("requestRef"):
            ref_to_msg.setdefault(r["requestRef"], r["message"]["id"])
    # Assistant messages get no blob: a tail hash names the transcript's reply,
    # {"role": "assistant", "content": <the content blocks of the assistant
    # records with that message.id, in file order>}.
    replies: dict[str, list] = {}
    for r in records:
        if r.get("type") == "assistant":
            replies.setdefault(r["message"]["id"], []).extend(r["message"]["content"])
    from_transcript = 0
    for content in replies.values():
        m = {"role": "assistant", "content": content}
        h = sha(m)
        if h not in blobs:
            blobs[h] = m
            from_transcript += 1
    print(f"{len(shapes)} shape(s), {len(blobs) - from_transcript} blob(s) + {from_transcript} assistant "
          f"message(s) from the transcript, {len(requests)} request(s); hash mismatches: {bad_hash}")

    caps = [json.loads(l) for l in (fixture / "capture.jsonl").read_text(encoding="utf-8").splitlines() if l.strip()]
    cap_by_msg = {}
    for n, c in enumerate(caps, 1):
        for line in (c["response"] or "").splitlines() if isinstance(c["response"], str) else []:
            if line.startswith("data:") and '"message_start"' in line:
                cap_by_msg[json.loads(line[5:])["message"]["id"]] = (n, c)

    built: dict[str, list] = {}
    rebuilt_lines = []
    all_same = True
    for r in requests:
        base = built[r["base"]] if "base" in r else []
        messages = copy.deepcopy(base[: r["keep"]]) + [copy.deepcopy(blobs[h]) for h in r["tail"]]
        built[r["id"]] = copy.deepcopy(messages)
        shape = copy.deepcopy(shapes[r["shapeHash"]])
        params = r["params"]
        body = {"model": params["model"], "messages": messages, "system": shape["system"],
                "tools": shape["tools"]}
        for k, v in params.items():
            if k not in ("model", "betas"):
                body[k] = v
        for cc in r["cacheControl"]:
            set_path(body, cc["path"], cc["value"])
        digest_in = {k: v for k, v in body.items() if k not in DIGEST_SKIP}
        digest_in["betas"] = params.get("betas")
        digest_ok = sha(digest_in) == r["requestDigest"]
        msg_id = ref_to_msg.get(r["id"])
        line, cap = cap_by_msg.get(msg_id, (None, None))
        print(f"\nrequest {r['id']} (keep {r['keep']} of {r.get('base', '-')}, tail {len(r['tail'])}) "
              f"-> reply {msg_id}, capture line {line}; requestDigest {'ok' if digest_ok else 'MISMATCH'}")
        if cap is None:
            all_same = False
            continue
        want = json.loads(cap["request"])
        # What the store does not hold, taken from the wire to finish the body:
        rebuilt = {}
        for k in WIRE_ORDER:
            if k in body:
                rebuilt[k] = body[k]
        for k in body:
            rebuilt.setdefault(k, body[k])
        text = wire(rebuilt)
        same = text == cap["request"]
        all_same &= same
        print(f"  store-only rebuild: {len(text.encode())} bytes vs captured {len(cap['request'].encode())}: "
              + ("byte-identical" if same else "differs:"))
        for d in first_diff(rebuilt, want):
            print("   ", d)
        # With the three things the store lacks filled in from the wire.
        fixed = copy.deepcopy(rebuilt)
        fixed["system"] = [want["system"][0]] + fixed["system"]
        fixed = {k: (want["metadata"] if k == "metadata" else fixed.get(k, want.get(k)))
                 for k in WIRE_ORDER if k in fixed or k in want}
        if "stream" in want:
            fixed["stream"] = want["stream"]
        text2 = wire(fixed)
        print("  + billing block, metadata, stream from the wire: "
              + ("byte-identical" if text2 == cap["request"] else "still differs: " + "; ".join(first_diff(fixed, want))[:600]))
        rebuilt_lines.append(text)
    if out_path:
        out_path.write_text("\n".join(rebuilt_lines) + "\n", encoding="utf-8")
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
