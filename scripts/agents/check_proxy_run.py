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

With --launches (scripts/proxy-agents.sh --per-launch, --concurrent, --damaged): each turn of
each agent was its own launch, all writing one shared --log (--log FILE) and one --state. Each
agent directory holds upstream-raw.jsonl (its own upstream's) and turns/<n>/{proxy.err,
proxy.rc}. Per agent:

  (a) bytes: the shared log's lines whose (path, body) the agent's upstream received are, as a
      multiset, exactly what it received: every request forwarded byte for byte;
  (b) verdicts: those lines, grouped by the launch that wrote them (in the order of the turns),
      are the rows each turn's launch printed, in order, and each printed verdict is
      `cacheline audit` of the shared log on that line; but with --set-aside N, the first
      request of turn N (its state set aside at that launch's start) is printed
      `cold_start: the first request of its session` while the audit, which reads the whole
      log, compares it with the earlier turn: that one request differs, no other;
  (c) resumes: each turn after the first has a request the audit compares with a request of
      an earlier launch (a resumed request), and no request of a session an earlier launch
      printed is printed `cold_start: the first request of its session` (but --set-aside's);
  (d) exit codes: every launch exited 0;
  (e) warnings: --warned N TEXT: a state warning containing TEXT printed exactly once, by
      turn N's launch, and no other state warning; --warned-each TEXT: exactly once by each
      launch; otherwise no state warning at all.
"""

import argparse
import base64
import collections
import json
import os
import re
import subprocess
import sys

from logline import request_bytes

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


# A state warning: in the exit summary (`  warning: …`), or printed as it happens.
STATE_WARNING = re.compile(r"^(?:cacheline proxy: |  warning: )the session state")
PREDECESSOR = re.compile(r"(?:vs|extends) line (\d+)")
FIRST_OF_SESSION = "cold_start: the first request of its session"


def audit_verdicts(bin_path, log):
    """Line -> verdict, as `cacheline audit LOG` prints them; and its problems."""
    audit = subprocess.run([bin_path, "audit", log], capture_output=True, text=True)
    audited = {}
    for line in audit.stdout.splitlines()[1:]:
        m = AUDIT_ROW.match(line)
        if m:
            audited[int(m.group(1))] = m.group(2)
    problems = []
    if audit.returncode != 0:
        problems.append(f"audit exit {audit.returncode}: {audit.stderr[:300]}")
    return audited, problems


def check_launches(a) -> int:
    with open(a.log, encoding="utf-8") as f:
        texts = f.read().splitlines()
    log_lines = [json.loads(l) for l in texts]
    requests = [request_bytes(l) for l in texts]
    audited, audit_problems = audit_verdicts(a.bin, a.log)
    failed = False
    for d in a.dirs:
        agent = os.path.basename(os.path.normpath(d))
        problems = list(audit_problems)
        raw_path = os.path.join(d, "upstream-raw.jsonl")
        raw = [json.loads(l) for l in open(raw_path, encoding="utf-8").read().splitlines() if l.strip()] \
            if os.path.exists(raw_path) else []
        received = collections.Counter(
            (r["path"].split("?", 1)[0], base64.b64decode(r["body_b64"])) for r in raw
        )
        # (a) the agent's lines of the shared log: what its upstream received.
        mine = [n for n, l in enumerate(log_lines, 1)
                if (l["path"], requests[n - 1]) in received]
        logged = collections.Counter(
            (log_lines[n - 1]["path"], requests[n - 1]) for n in mine
        )
        if logged != received or not mine:
            problems.append(f"bytes: upstream received {len(raw)} bodies, the shared log has "
                            f"{len(mine)} of them")
        # (b) grouped by launch, in order of the turns.
        groups = collections.OrderedDict()
        for n in mine:
            groups.setdefault(log_lines[n - 1].get("launch"), []).append(n)
        turns_dir = os.path.join(d, "turns")
        turns = sorted(os.listdir(turns_dir), key=int) if os.path.isdir(turns_dir) else []
        if None in groups:
            problems.append("log lines without a launch")
        if len(groups) != len(turns):
            problems.append(f"{len(turns)} launches ran, {len(groups)} wrote lines")
        printed_all = []  # (turn, line, session, printed verdict)
        warnings = []  # (turn, text)
        for t, lines in zip(turns, groups.values()):
            tdir = os.path.join(turns_dir, t)
            rc = open(os.path.join(tdir, "proxy.rc")).read().strip()
            if rc != "0":
                problems.append(f"turn {t}: exit {rc}")
            rows = []
            for line in open(os.path.join(tdir, "proxy.err"), encoding="utf-8").read().splitlines():
                m = PRINTED.match(line)
                if m:
                    rows.append((m.group(1), m.group(9)))
                elif STATE_WARNING.match(line):
                    warnings.append((int(t), line))
            if len(rows) != len(lines):
                problems.append(f"turn {t}: {len(rows)} printed, {len(lines)} logged")
            for n, (session, verdict) in zip(lines, rows):
                printed_all.append((int(t), n, session, verdict))
        set_aside_line = None
        if a.set_aside is not None:
            first = [p for p in printed_all if p[0] == a.set_aside]
            if not first:
                problems.append(f"turn {a.set_aside}: nothing printed")
            else:
                _, n, _, verdict = first[0]
                set_aside_line = n
                if not verdict.startswith(FIRST_OF_SESSION):
                    problems.append(f"set aside at turn {a.set_aside}: line {n} printed {verdict[:120]!r}, "
                                    "not the first request of its session")
                if audited.get(n, "").startswith("cold_start"):
                    problems.append(f"set aside at turn {a.set_aside}: the audit too says line {n} "
                                    "is a cold start: nothing was lost")
        equal = 0
        for t, n, _, verdict in printed_all:
            if n == set_aside_line:
                continue
            if n not in audited:
                problems.append(f"line {n} printed but not audited")
            elif cut(audited[n]) != verdict:
                problems.append(f"turn {t} line {n}: printed {verdict[:160]!r}, audit {audited[n][:160]!r}")
            else:
                equal += 1
        # (c) resumes.
        launch_of = {n: i for i, lines in enumerate(groups.values(), 1) for n in lines}
        seen_sessions = set()
        resumed = 0
        for t in sorted({p[0] for p in printed_all}):
            rows = [p for p in printed_all if p[0] == t]
            if t > 1 and t != a.set_aside:
                here = [n for _, n, _, _ in rows
                        if (m := PREDECESSOR.search(audited.get(n, "")))
                        and launch_of.get(int(m.group(1)), t) < t]
                if not here:
                    problems.append(f"turn {t}: no request continues an earlier launch's")
                resumed += len(here)
            for _, n, session, verdict in rows:
                if n != set_aside_line and session in seen_sessions and verdict.startswith(FIRST_OF_SESSION):
                    problems.append(f"turn {t} line {n}: session {session} was seen, yet {verdict[:80]!r}")
            seen_sessions.update(session for _, _, session, _ in rows)
        # (e) warnings.
        expected = a.warned[1] if a.warned else a.warned_each
        wrong = [w for w in warnings if not expected or expected not in w[1]]
        if wrong:
            problems.append(f"state warnings: {[w[1][:120] for w in wrong][:3]}")
        ours = [w for w in warnings if expected and expected in w[1]]
        if a.warned:
            turn = int(a.warned[0])
            if len(ours) != 1 or ours[0][0] != turn:
                problems.append(f"the warning {expected!r}: printed by turns {[w[0] for w in ours]}, "
                                f"expected once by turn {turn}")
        if a.warned_each:
            per = collections.Counter(w[0] for w in ours)
            if sorted(per) != [int(t) for t in turns] or max(per.values()) > 1:
                problems.append(f"the warning {expected!r}: printed {dict(per)} times per turn, "
                                "expected once by each launch")
        causes = collections.Counter(v.split(":")[0].split(" vs ")[0][:40] for _, _, _, v in printed_all)
        summary = (f"{len(mine)} requests over {len(groups)} launches, bytes equal, {equal} verdicts "
                   f"= audit of the shared log{'' if set_aside_line is None else f' (line {set_aside_line}: set aside, printed cold_start)'}, "
                   f"{resumed} resumed requests, none cold_start, exit 0 each; "
                   f"{len(warnings)} state warnings; verdicts {dict(causes)}")
        if problems:
            print(f"FAIL {agent}: " + "; ".join(problems[:8]) + f" [{summary}]")
            failed = True
        else:
            print(f"PASS {agent}: {summary}")
    return 1 if failed else 0


def main() -> int:
    if "--launches" in sys.argv[1:]:
        ap = argparse.ArgumentParser()
        ap.add_argument("--launches", action="store_true")
        ap.add_argument("--bin", required=True)
        ap.add_argument("--log", required=True, help="the shared --log")
        ap.add_argument("--set-aside", type=int, help="the turn whose launch set the state aside")
        ap.add_argument("--warned", nargs=2, metavar=("TURN", "TEXT"))
        ap.add_argument("--warned-each", metavar="TEXT")
        ap.add_argument("dirs", nargs="+")
        return check_launches(ap.parse_args())
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

    proxy_texts = [l for l in (read("proxy.jsonl") or "").splitlines() if l.strip()]
    proxy_lines = [json.loads(l) for l in proxy_texts]
    proxy_requests = [request_bytes(l) for l in proxy_texts]
    if len(proxy_lines) < a.min_requests:
        problems.append(f"the proxy logged {len(proxy_lines)} requests")

    # (a) bytes
    sent = collections.Counter((r["path"], b) for r, b in zip(proxy_lines, proxy_requests))
    streamed = sum(
        1 for r, b in zip(proxy_lines, proxy_requests)
        if "streamGenerateContent" in r["path"]
        or re.search(r'"stream"\s*:\s*true', b.decode("utf-8", errors="replace"))
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
