#!/usr/bin/env python3
"""Check one agent's run through `cacheline proxy` (scripts/proxy-agents.sh).

In the run directory: upstream-raw.jsonl (the upstream's --raw-log: each body exactly as
received), proxy.jsonl (the proxy's --log), proxy.err (its standard error, with one verdict
line per request), proxy.rc and child.rc (exit codes).  Checks:

  (a) bytes: the multiset of (path, body) the upstream received equals the one the proxy
      logged as received from the agent (paths without their query), every request;
  (b) verdicts: `cacheline audit proxy.jsonl` gives, line for line, the verdict the proxy
      printed for that request;
  (c) the proxy's exit code is the child's.

Prints a one-line summary; exits 1 with the reasons when a check fails.
"""

import argparse
import base64
import collections
import json
import os
import re
import subprocess
import sys

VERDICT_BYTES = 600  # cacheline-proxy's cut of a printed verdict
PRINTED = re.compile(
    r"^cacheline proxy: (\S*) #(\d+) (\S+) (\S+) input=(\d+) cached=(\S+) expected=(\d+) "
    r"status=(\d+)(?: \[[^\]]+\])?: (.*)$"
)
AUDIT_ROW = re.compile(r"^\s*(\d+)\s+\d+(?:\s+\S+){6}  (.*)$")


def cut(v: str) -> str:
    b = v.encode()
    if len(b) <= VERDICT_BYTES:
        return v
    return b[:VERDICT_BYTES].decode("utf-8", errors="ignore") + "\u2026"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--no-raw", action="store_true", help="no upstream raw log (skip (a))")
    ap.add_argument("--allow-agent-failure", action="store_true",
                    help="a real model: the agent may fail (its exit code must still be the proxy's)")
    ap.add_argument("--min-requests", type=int, default=1)
    a = ap.parse_args()
    d = a.dir
    problems = []

    def read(name):
        p = os.path.join(d, name)
        return open(p, encoding="utf-8").read() if os.path.exists(p) else None

    # (c) exit codes
    prc, crc = (read("proxy.rc") or "").strip(), (read("child.rc") or "").strip()
    if not crc or prc != crc:
        problems.append(f"exit codes: proxy {prc or '?'} child {crc or '?'}")

    proxy_lines = [json.loads(l) for l in (read("proxy.jsonl") or "").splitlines() if l.strip()]
    if len(proxy_lines) < a.min_requests:
        problems.append(f"the proxy logged {len(proxy_lines)} requests")

    # (a) bytes
    sent = collections.Counter((r["path"], r["request"].encode("utf-8")) for r in proxy_lines)
    streamed = sum(
        1 for r in proxy_lines
        if "streamGenerateContent" in r["path"] or re.search(r'"stream"\s*:\s*true', r["request"])
    )
    if not a.no_raw:
        raw = [json.loads(l) for l in (read("upstream-raw.jsonl") or "").splitlines() if l.strip()]
        got = collections.Counter(
            (r["path"].split("?", 1)[0], base64.b64decode(r["body_b64"])) for r in raw
        )
        if got != sent:
            only_up = got - sent
            only_px = sent - got
            problems.append(
                f"bytes: upstream received {len(raw)} bodies, proxy logged {len(proxy_lines)}; "
                f"{sum(only_up.values())} only upstream {[k[0] for k in only_up][:5]}, "
                f"{sum(only_px.values())} only in the proxy's log {[k[0] for k in only_px][:5]}"
            )

    if streamed == 0 or streamed == len(proxy_lines):
        problems.append(f"not both kinds: {streamed} of {len(proxy_lines)} requests streamed")
    if crc and crc != "0" and not a.allow_agent_failure:
        problems.append(f"the agent failed (exit {crc}); see turn*.err")

    # (b) verdicts
    printed = {}
    for line in (read("proxy.err") or "").splitlines():
        m = PRINTED.match(line)
        if m:
            printed[int(m.group(2))] = m.group(9)
    audit = subprocess.run([a.bin, "audit", os.path.join(d, "proxy.jsonl")],
                           capture_output=True, text=True)
    audited = {}
    for line in audit.stdout.splitlines()[1:]:
        m = AUDIT_ROW.match(line)
        if m:
            audited[int(m.group(1))] = m.group(2)
    if audit.returncode != 0:
        problems.append(f"audit exit {audit.returncode}: {audit.stderr[:300]}")
    if len(printed) != len(proxy_lines) or len(audited) != len(proxy_lines):
        problems.append(
            f"verdicts: {len(printed)} printed, {len(audited)} audited, {len(proxy_lines)} logged"
        )
    for n, v in sorted(printed.items()):
        if n not in audited:
            problems.append(f"verdicts: request #{n} printed but not audited")
        elif cut(audited[n]) != v:
            problems.append(f"verdicts: #{n} printed {v[:200]!r}, audit {audited[n][:200]!r}")
    causes = collections.Counter(
        v.split(":")[0].split(";")[0][:40] for v in printed.values()
    )

    summary = (f"{len(proxy_lines)} requests ({streamed} streamed, {len(proxy_lines) - streamed} "
               f"whole), bytes {'not compared' if a.no_raw else 'equal'}, {len(printed)} verdicts = "
               f"audit, exit {prc}; verdicts {dict(causes)}")
    if problems:
        print("; ".join(problems[:8]) + f" [{summary}]")
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
