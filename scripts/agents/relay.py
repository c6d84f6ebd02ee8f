#!/usr/bin/env python3
"""A recording relay in front of a real upstream (a llama.cpp server) for
scripts/proxy-agents.sh: every request body is appended to --raw-log exactly as it came
off the wire (base64: {method, path, content_encoding, body_b64}, the format of
upstream.py's --raw-log), then the request is sent on to --target unchanged (hop-by-hop
headers aside) and the reply streamed back as it arrives, its end marked by closing the
connection.  Python 3 standard library only.
"""

import argparse
import base64
import http.client
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
       "upgrade", "host", "content-length"}
LOCK = threading.Lock()


class Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    target = None  # (host, port)
    raw_log = ""

    def log_message(self, fmt, *args):
        pass

    def body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            out = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(out)
                out.append(self.rfile.read(size))
                self.rfile.readline()
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def relay(self):
        raw = self.body()
        with LOCK, open(self.raw_log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "content_encoding": self.headers.get("content-encoding", ""),
                                "body_b64": base64.b64encode(raw).decode()}) + "\n")
        conn = http.client.HTTPConnection(*self.target, timeout=600)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        headers["content-length"] = str(len(raw))
        conn.request(self.command, self.path, body=raw, headers=headers)
        resp = conn.getresponse()
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("connection", "close")
        self.end_headers()
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            self.wfile.write(chunk)
            self.wfile.flush()
        self.close_connection = True
        conn.close()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = relay


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="http://HOST:PORT of the real upstream")
    ap.add_argument("--raw-log", required=True)
    ap.add_argument("--port-file", required=True)
    a = ap.parse_args()
    t = urlsplit(a.target)
    Relay.target = (t.hostname, t.port or 80)
    Relay.raw_log = a.raw_log
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    srv.daemon_threads = True
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
