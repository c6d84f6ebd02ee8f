#!/usr/bin/env python3
"""Copy a coding agent's own session store out of a capture's throwaway HOME.

Usage: copy_stores.py AGENT HOME DEST

AGENT is one of claude-code, codex, gemini-cli, qwen-code, opencode.  Copies
only the files of the agent's session store (STORES below), at the same paths
relative to HOME, into DEST (a fixture's `home/` folder): no caches, logs,
binaries or settings.  Then

* text files: every dummy key (`sk-test…`) is replaced by `[redacted]`, and
  each line still holding a key `authorization`, `api_key`, `apiKey` or
  `x-api-key` followed by `:` or `=` is reported (for a look by hand);
* SQLite databases (opencode): copied with their -wal/-shm files, then the
  copy is opened with sqlite3: every dummy key in a text column replaced, the
  WAL checkpointed into the file, journal mode set to DELETE and the file
  VACUUMed, so the fixture is one self-contained .db (the live store is WAL
  mode; see consolidate_sqlite).

Prints one line per file copied (size, redactions) and the list of the other
files HOME holds (not copied), so a new store location shows up.

Python 3.11 standard library only.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import sys
from pathlib import Path

# Glob patterns (relative to HOME, `**` = any depth) of each agent's session store.
STORES = {
    "claude-code": [".claude/projects/*/*.jsonl", ".claude/projects/*/*/**/*.jsonl"],
    "codex": [".codex/sessions/**/rollout-*.jsonl"],
    "gemini-cli": [".gemini/tmp/*/chats/*"],
    "qwen-code": [".qwen/projects/*/chats/*.jsonl", ".qwen/usage_record.jsonl"],
    "opencode": [".local/share/opencode/opencode.db", ".local/share/opencode/opencode.db-wal",
                 ".local/share/opencode/opencode.db-shm"],
}

KEY = re.compile(r"sk-test[-A-Za-z0-9_]*")
# A credential-shaped key ("authorization": …, "api_key": …), not the word in prose.
SUSPECT = re.compile(r"[\"']?(authorization|x-api-key|api[_-]?key)[\"']?\s*[:=]", re.I)
REDACTED = "[redacted]"


def redact_text(path: Path) -> int:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return 0
    n = len(KEY.findall(text))
    if n:
        path.write_text(KEY.sub(REDACTED, text), encoding="utf-8")
    for i, line in enumerate(text.splitlines(), 1):
        for m in SUSPECT.finditer(line):
            ctx = line[max(0, m.start() - 60):m.end() + 60]
            print(f"   note: {path.name}:{i}: {m.group(0)!r} in …{ctx}…")
    return n


def consolidate_sqlite(db: Path) -> int:
    """Fold the -wal into the copied database, redact, and VACUUM it.

    The live store is in WAL mode and most recent rows may still sit in the
    -wal file only (the main file alone lacks them), so the copy is opened with
    sqlite3 next to its copied -wal/-shm; every dummy key in a text column is
    replaced, the WAL checkpointed, the journal mode set to DELETE (so a test
    that opens the fixture leaves no -wal/-shm files in the tree) and the file
    VACUUMed.  Returns the number of values redacted."""
    con = sqlite3.connect(db)
    n = 0
    tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
    for t in tables:
        for col in con.execute(f'pragma table_info("{t}")').fetchall():
            c = col[1]
            rows = con.execute(f'select rowid, "{c}" from "{t}" where cast("{c}" as text) like ?',
                               ("%sk-test%",)).fetchall()
            for rowid, v in rows:
                if isinstance(v, bytes):
                    v = KEY.sub(REDACTED, v.decode("utf-8")).encode("utf-8")
                else:
                    v = KEY.sub(REDACTED, str(v))
                con.execute(f'update "{t}" set "{c}" = ? where rowid = ?', (v, rowid))
            if rows:
                n += len(rows)
                print(f"   redacted {len(rows)} value(s) in {t}.{c}")
            hits = con.execute(f'select count(*) from "{t}" where lower(cast("{c}" as text)) like ? '
                               f'or lower(cast("{c}" as text)) like ?',
                               ("%authorization%", "%api_key%")).fetchone()[0]
            if hits:
                print(f"   note: {hits} value(s) of {t}.{c} mention authorization/api_key")
    con.commit()
    con.execute("pragma wal_checkpoint(TRUNCATE)")
    con.execute("pragma journal_mode=DELETE")
    con.execute("vacuum")
    con.close()
    return n


def main() -> int:
    agent, home, dest = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    patterns = STORES[agent]
    chosen = {p.relative_to(home).as_posix() for pat in patterns for p in home.glob(pat) if p.is_file()}
    copied, others = sorted(chosen), []
    for root, dirs, files in os.walk(home):
        dirs.sort()
        for f in sorted(files):
            rel = (Path(root) / f).relative_to(home).as_posix()
            if rel not in chosen:
                others.append(rel)
    dbs = []
    for rel in copied:
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(home / rel, out)
        if rel.endswith(".db"):
            dbs.append(out)
    for rel in copied:
        out = dest / rel
        if not out.exists():
            continue
        if rel.endswith((".db", ".db-wal", ".db-shm")):
            continue
        n = redact_text(out)
        print(f"  {rel}  {out.stat().st_size} B" + (f"  ({n} dummy key(s) -> {REDACTED})" if n else ""))
    for db in dbs:
        live = ", ".join(f"{Path(str(db) + x).name} {Path(str(db) + x).stat().st_size} B"
                         for x in ("", "-wal", "-shm") if Path(str(db) + x).exists())
        n = consolidate_sqlite(db)
        for x in ("-wal", "-shm"):
            Path(str(db) + x).unlink(missing_ok=True)
        print(f"  {db.relative_to(dest).as_posix()}  {db.stat().st_size} B (live: {live}; WAL folded in, "
              f"journal_mode=DELETE, vacuumed" + (f", {n} dummy key(s) -> {REDACTED}" if n else "") + ")")
    if not copied:
        print(f"  no session store found for {agent} under {home}", file=sys.stderr)
    print(f"  not copied ({len(others)} files): " + ", ".join(others[:80]) + (" …" if len(others) > 80 else ""))
    return 0 if copied else 1


if __name__ == "__main__":
    sys.exit(main())
