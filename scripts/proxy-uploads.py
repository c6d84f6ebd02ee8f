#!/usr/bin/env python3
"""Resident memory of `cacheline proxy` under concurrent large uploads (issue 34).

Starts `cacheline proxy` (the binary given) in front of an upstream run here, which drains
each request body and answers after a delay (so every upload's copy is in flight at once),
sends N concurrent POSTs of SIZE bytes through the proxy, and samples the proxy's VmRSS
every second (/proc/PID/status) until 30 s after the last answer; then reads its /metrics
and stops it with SIGINT.

    scripts/proxy-uploads.py target/debug/cacheline [--uploads 100] [--size 31457280] [--delay 15]

The body is SIZE bytes of `x` (not JSON: the analysis of each copy it keeps stops at
once), so the figure is what the proxy holds, not one analysis' working set.
Loopback only; Linux (/proc).
"""
import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid, field="VmRSS"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


async def upstream(reader, writer, delay):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v)
            while length:
                got = await reader.read(min(length, 1 << 20))
                if not got:
                    return
                length -= len(got)
            await asyncio.sleep(delay)
            body = b'{"usage":{"prompt_tokens":1}}'
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                % len(body)
                + body
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def upload(port, payload):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(payload)
    )
    view = memoryview(payload)
    for off in range(0, len(payload), 1 << 20):
        w.write(view[off : off + (1 << 20)])
        await w.drain()
    reply = await r.read()
    w.close()
    return reply.startswith(b"HTTP/1.1 200")


async def sample(pid, samples, stop):
    while not stop.is_set():
        v = rss_kib(pid)
        if v is not None:
            samples.append(v)
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except asyncio.TimeoutError:
            pass


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--uploads", type=int, default=100)
    ap.add_argument("--size", type=int, default=30 << 20)
    ap.add_argument("--delay", type=float, default=15.0)
    a = ap.parse_args()
    up_port, proxy_port = free_port(), free_port()
    server = await asyncio.start_server(
        lambda r, w: upstream(r, w, a.delay), "127.0.0.1", up_port
    )
    proxy = subprocess.Popen(
        [a.binary, "proxy", "--listen", f"127.0.0.1:{proxy_port}",
         "--upstream", f"openai=http://127.0.0.1:{up_port}"],
        stderr=subprocess.DEVNULL,
    )
    # Serving (its /metrics answers) once the analysis' tokenizer is loaded.
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{proxy_port}/metrics", timeout=1).read()
            break
        except OSError:
            await asyncio.sleep(0.1)
    idle = rss_kib(proxy.pid)
    samples, stop = [], asyncio.Event()
    sampler = asyncio.create_task(sample(proxy.pid, samples, stop))
    payload = b"x" * a.size
    t = time.time()
    ok = await asyncio.gather(*(upload(proxy_port, payload) for _ in range(a.uploads)))
    took = time.time() - t
    after = rss_kib(proxy.pid)
    await asyncio.sleep(30)
    later = rss_kib(proxy.pid)
    peak = rss_kib(proxy.pid, "VmHWM")
    stop.set()
    await sampler
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{proxy_port}/metrics").read().decode()
    proxy.send_signal(signal.SIGINT)
    proxy.wait(timeout=120)
    server.close()
    print(f"{sum(ok)} of {a.uploads} uploads of {a.size} bytes answered 200 in {took:.1f} s "
          f"(upstream answering {a.delay:g} s after each body)")
    print(f"proxy VmRSS: idle {idle} KiB; peak {peak} KiB (VmHWM; sampled max {max(samples)} KiB); "
          f"after the last answer {after} KiB; 30 s later {later} KiB")
    for line in metrics.splitlines():
        if line.startswith(("cacheline_proxy_forwarded_total", "cacheline_proxy_analysis_")):
            print(line)


if __name__ == "__main__":
    if not sys.platform.startswith("linux"):
        sys.exit("Linux only (/proc)")
    asyncio.run(main())
