#!/usr/bin/env python3
"""Show what changed between two requests of an agent capture.

Usage: diff_pair.py CAPTURE.jsonl A B

A and B are 1-based line numbers of CAPTURE (the JSONL written by
upstream.py).  Prints:

* the path of both lines, and the first differing byte of the raw request
  bodies (the offset a prefix cache sees), with context;
* per top-level JSON field: equal / added / removed / changed, and for a
  changed field the JSON path of its first differing leaf plus the character
  offset and context inside that leaf; for arrays, whether B extends A
  (A's elements are a prefix of B's) and what the new elements are;
* header differences (added / removed / changed values).

Python 3 standard library only.
"""

import json
import sys

from logline import request_bytes

CTX = 40


def snippet(s: str, i: int) -> str:
    return json.dumps(s[max(0, i - CTX):i + CTX])


def same(a, b) -> bool:
    """Equal including dict key order (what the bytes on the wire see)."""
    return json.dumps(a, ensure_ascii=False) == json.dumps(b, ensure_ascii=False)


def first_diff(a, b, path="$"):
    """Return (json_path, description) of the first difference, or None."""
    if type(a) is not type(b):
        return path, "type %s -> %s: %s -> %s" % (type(a).__name__, type(b).__name__, short(a), short(b))
    if isinstance(a, dict):
        keys = list(a) + [k for k in b if k not in a]
        for k in keys:
            if k not in a:
                return "%s.%s" % (path, k), "added: %s" % short(b[k])
            if k not in b:
                return "%s.%s" % (path, k), "removed: %s" % short(a[k])
            if not same(a[k], b[k]):
                return first_diff(a[k], b[k], "%s.%s" % (path, k))
        if list(a) != list(b):
            return path, "same keys, different order: %s -> %s" % (list(a), list(b))
        return None
    if isinstance(a, list):
        for i in range(min(len(a), len(b))):
            if not same(a[i], b[i]):
                return first_diff(a[i], b[i], "%s[%d]" % (path, i))
        if len(a) != len(b):
            return path, "length %d -> %d" % (len(a), len(b))
        return None
    if isinstance(a, str):
        if a == b:
            return None
        i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
        return path, "char %d of %d/%d: %s -> %s" % (i, len(a), len(b), snippet(a, i), snippet(b, i))
    if a != b:
        return path, "%s -> %s" % (short(a), short(b))
    return None


def short(v, n=160) -> str:
    s = json.dumps(v, ensure_ascii=False)
    return s if len(s) <= n else s[:n] + "...(%d chars)" % len(s)


def describe_item(v) -> str:
    if isinstance(v, dict):
        bits = [str(v[k]) for k in ("type", "role", "name") if isinstance(v.get(k), str)]
        c = v.get("content", v.get("parts"))
        if isinstance(c, list):
            bits.append("[" + ",".join(
                str(x.get("type") or next(iter(x), "?")) if isinstance(x, dict) else type(x).__name__
                for x in c) + "]")
        elif isinstance(c, str):
            bits.append("str(%d)" % len(c))
        return "/".join(bits) or short(v, 60)
    return short(v, 60)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
    a_no, b_no = int(sys.argv[2]), int(sys.argv[3])
    ra, rb = json.loads(lines[a_no - 1]), json.loads(lines[b_no - 1])
    print("A = line %d  %s" % (a_no, ra["path"]))
    print("B = line %d  %s" % (b_no, rb["path"]))
    ba, bb = request_bytes(lines[a_no - 1]), request_bytes(lines[b_no - 1])
    i = next((k for k in range(min(len(ba), len(bb))) if ba[k] != bb[k]), min(len(ba), len(bb)))
    print("raw body: %d -> %d bytes; common prefix %d bytes" % (len(ba), len(bb), i))
    if i < max(len(ba), len(bb)):
        print("  A: %s" % json.dumps(ba[max(0, i - CTX):i + CTX].decode("utf-8", "replace")))
        print("  B: %s" % json.dumps(bb[max(0, i - CTX):i + CTX].decode("utf-8", "replace")))
    try:
        ja, jb = json.loads(ba or b"{}"), json.loads(bb or b"{}")
    except ValueError:
        ja = jb = None
    if isinstance(ja, dict) and isinstance(jb, dict):
        print("top-level key order: %s" % ("same" if [k for k in ja if k in jb] == [k for k in jb if k in ja]
                                            else "%s -> %s" % (list(ja), list(jb))))
        for k in list(ja) + [k for k in jb if k not in ja]:
            if k not in jb:
                print("field %s: removed (%s)" % (k, short(ja[k], 80)))
            elif k not in ja:
                print("field %s: added (%s)" % (k, short(jb[k], 80)))
            elif same(ja[k], jb[k]):
                print("field %s: equal" % k)
            elif isinstance(ja[k], list) and isinstance(jb[k], list):
                x, y = ja[k], jb[k]
                eq = 0
                while eq < min(len(x), len(y)) and same(x[eq], y[eq]):
                    eq += 1
                if eq == len(x):
                    print("field %s: B extends A: %d -> %d elements; new: %s" % (
                        k, len(x), len(y), ", ".join("[%d] %s" % (j, describe_item(y[j])) for j in range(eq, len(y)))))
                else:
                    print("field %s: %d -> %d elements; first %d equal" % (k, len(x), len(y), eq))
                    for j in range(eq, min(len(x), len(y))):
                        d = first_diff(x[j], y[j], "%s[%d]" % (k, j))
                        if d:
                            print("  %s: %s" % d)
                    if len(y) > len(x):
                        print("  new in B: %s" % ", ".join("[%d] %s" % (j, describe_item(y[j])) for j in range(len(x), len(y))))
                    elif len(x) > len(y):
                        print("  dropped from A: %s" % ", ".join("[%d] %s" % (j, describe_item(x[j])) for j in range(len(y), len(x))))
            else:
                d = first_diff(ja[k], jb[k], k)
                print("field %s: changed: %s: %s" % (k, d[0], d[1]))
    ha, hb = ra["headers"], rb["headers"]
    hd = []
    for k in list(ha) + [k for k in hb if k not in ha]:
        if k not in hb:
            hd.append("  - %s: %s" % (k, ha[k]))
        elif k not in ha:
            hd.append("  + %s: %s" % (k, hb[k]))
        elif ha[k] != hb[k] and k != "content-length":
            hd.append("  ~ %s: %s -> %s" % (k, ha[k], hb[k]))
    print("headers: %s" % ("same (except content-length)" if not hd else "differ"))
    for h in hd:
        print(h)


if __name__ == "__main__":
    main()
