"""The request body of a `cacheline proxy --log` line (or a capture's line), as bytes.

The proxy logs a body that is one JSON object on one line as that JSON itself, any other
body as a JSON string of its text; json.loads would re-serialize the former, so its bytes
are cut from the line.
"""
import json

_KEY = ',"request":'


def request_bytes(line: str) -> bytes:
    """The request body a log line holds, byte for byte."""
    parsed = json.loads(line)
    request = parsed["request"]
    if isinstance(request, str):
        return request.encode("utf-8")
    # The proxy writes its keys sorted (`headers` always before `request`) and every string
    # escaped, so the first `,"request":` outside a nested value is the key itself; the
    # decoder then reads exactly the value's extent.
    start = line.index(_KEY) + len(_KEY)
    _, end = json.JSONDecoder().raw_decode(line, start)
    return line[start:end].encode("utf-8")
