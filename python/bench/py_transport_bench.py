#!/usr/bin/env python3
"""Python receiving raw 1080p I420 video: a local WebSocket vs shmring.

The same stream of 1920x1080 I420 frames (3,110,400 bytes each) is received by a
Python process two ways, rate-limited (150 MB/s by default) and unthrottled:

* py-websocket: a `websockets` server in the receiving process; the sender is a
  `websockets` client in another process sending each frame as one binary
  message, masked (as every client must) and fragmented at 131,000 bytes, as
  Chromium does.
* py-shmring: a shmring Consumer in the receiving process; the sender is a
  shmring Producer in another process writing each frame in place
  (reserve_video, media header, the picture copied into the planes, commit).
  The receiver takes zero-copy plane views (frame.planes()) and releases the
  frame.

The receiver does nothing else with the frames, so the figures are the cost of
the transport. CPU is the receiving process's user+system time (getrusage)
between the first and the last frame. One JSON line per run on stdout:

    {"transport": "py-shmring", "workload": "1080p-i420@150MB/s", "frames": ...,
     "bytes": ..., "seconds": ..., "cpu_s_per_gib": ..., "cpu_pct": ...}

Usage: py_transport_bench.py [--seconds 5] [--rate-mbps 150]
           [--transports py-websocket,py-shmring] [--workloads rated,unthrottled]
Needs: shmring (this package), websockets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import uuid

WIDTH, HEIGHT = 1920, 1080
FRAME = WIDTH * HEIGHT * 3 // 2  # 3,110,400 bytes of I420
FRAGMENT = 131_000
END_STREAM = 0xFFFF


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Meter:
    """Counts frames after the first one and the CPU spent meanwhile."""

    def __init__(self) -> None:
        self.frames = 0
        self.bytes = 0
        self.t0 = 0.0
        self.c0 = 0.0
        self.started = False

    def frame(self, n: int) -> None:
        if not self.started:
            self.started = True
            self.t0, self.c0 = time.perf_counter(), cpu_s()
            return
        self.frames += 1
        self.bytes += n

    def result(self, transport: str, workload: str) -> dict[str, object]:
        secs = time.perf_counter() - self.t0 if self.started else 0.0
        cpu = cpu_s() - self.c0 if self.started else 0.0
        gib = self.bytes / (1 << 30)
        return {
            "transport": transport,
            "workload": workload,
            "frames": self.frames,
            "bytes": self.bytes,
            "seconds": round(secs, 3),
            "cpu_s": round(cpu, 4),
            "cpu_s_per_gib": round(cpu / gib, 4) if gib else None,
            "cpu_pct": round(100.0 * cpu / secs, 2) if secs else None,
            "fps": round(self.frames / secs, 1) if secs else None,
            "mb_per_s": round(self.bytes / secs / 1e6, 1) if secs else None,
        }


class Pacer:
    def __init__(self, rate_bps: float | None, frame_bytes: int) -> None:
        self.period = frame_bytes / rate_bps if rate_bps else 0.0
        self.start = time.perf_counter()
        self.n = 0

    def due(self) -> float:
        """Seconds to wait before the next frame."""
        self.n += 1
        if not self.period:
            return 0.0
        return max(0.0, self.start + (self.n - 1) * self.period - time.perf_counter())


# ---- WebSocket -------------------------------------------------------------------


def ws_recv(workload: str) -> None:
    from websockets.asyncio.server import serve

    meter = Meter()
    done: asyncio.Future[None]

    async def handler(ws) -> None:  # type: ignore[no-untyped-def]
        async for msg in ws:
            if isinstance(msg, str):
                break
            meter.frame(len(msg))
        if not done.done():
            done.set_result(None)

    async def main() -> None:
        nonlocal done
        done = asyncio.get_running_loop().create_future()
        async with serve(handler, "127.0.0.1", 0, max_size=None, compression=None) as server:
            port = server.sockets[0].getsockname()[1]
            print(f"ready {port}", flush=True)
            await done
        print(json.dumps(meter.result("py-websocket", workload)), flush=True)

    asyncio.run(main())


def ws_send(port: int, seconds: float, rate_bps: float | None) -> None:
    from websockets.asyncio.client import connect

    frame = bytes(range(256)) * (FRAME // 256) + bytes(FRAME % 256)
    view = memoryview(frame)
    fragments = [view[i : i + FRAGMENT] for i in range(0, FRAME, FRAGMENT)]

    async def main() -> None:
        uri = f"ws://127.0.0.1:{port}/"
        async with connect(uri, max_size=None, compression=None) as ws:
            pacer = Pacer(rate_bps, FRAME)
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                wait = pacer.due()
                if wait:
                    await asyncio.sleep(wait)
                await ws.send(fragments)  # one message, fragmented, masked
            await ws.send("END")

    asyncio.run(main())


# ---- shmring ---------------------------------------------------------------------


def shm_recv(ring_name: str, workload: str) -> None:
    import numpy  # noqa: F401  (imported before the first frame, not during it)

    import shmring

    meter = Meter()
    with shmring.Consumer(ring_name, create=True, capacity=64 << 20) as ring:
        print("ready 0", flush=True)
        while True:
            frame = ring.next(timeout=30.0)
            if frame is None:
                raise SystemExit("py-shmring receiver: no frame for 30 s")
            with frame:
                if frame.stream == END_STREAM:
                    break
                y, u, v = frame.planes()  # zero-copy views of the frame
                meter.frame(y.nbytes + u.nbytes + v.nbytes)
                del y, u, v
    print(json.dumps(meter.result("py-shmring", workload)), flush=True)


def shm_send(ring_name: str, seconds: float, rate_bps: float | None) -> None:
    import numpy as np

    import shmring

    # The same picture the WebSocket sender sends, copied into the ring in place
    # as a capture process would write it.
    src = np.frombuffer(bytes(range(256)) * (FRAME // 256) + bytes(FRAME % 256), np.uint8)
    sy = src[: WIDTH * HEIGHT].reshape(HEIGHT, WIDTH)
    su = src[WIDTH * HEIGHT : WIDTH * HEIGHT * 5 // 4].reshape(HEIGHT // 2, WIDTH // 2)
    sv = src[WIDTH * HEIGHT * 5 // 4 :].reshape(HEIGHT // 2, WIDTH // 2)
    p = shmring.Producer(ring_name, timeout=10.0)
    pacer = Pacer(rate_bps, FRAME)
    end = time.perf_counter() + seconds
    seq = 0
    while time.perf_counter() < end:
        wait = pacer.due()
        if wait:
            time.sleep(wait)
        with p.reserve_video(WIDTH, HEIGHT, stream=1, sequence=seq) as (y, u, v):
            np.copyto(y, sy)
            np.copyto(u, su)
            np.copyto(v, sv)
        seq += 1
    p.send(b"END", stream=END_STREAM)
    p.close()


# ---- driver ----------------------------------------------------------------------


def run_pair(transport: str, workload: str, seconds: float, rate: float | None) -> dict:
    me = [sys.executable, os.path.abspath(__file__)]
    ring = f"py-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    if transport == "py-websocket":
        recv_args = ["--role", "ws-recv", "--workload", workload]
    else:
        recv_args = ["--role", "shm-recv", "--ring", ring, "--workload", workload]
    procs: list[subprocess.Popen[str]] = []
    try:
        recv = subprocess.Popen(me + recv_args, stdout=subprocess.PIPE, text=True)
        procs.append(recv)
        assert recv.stdout is not None
        line = recv.stdout.readline().split()
        if not line or line[0] != "ready":
            raise SystemExit(f"{transport} receiver did not start")
        send_args = ["--seconds", str(seconds), "--rate-mbps", str(rate / 1e6 if rate else 0)]
        if transport == "py-websocket":
            send_args += ["--role", "ws-send", "--port", line[1]]
        else:
            send_args += ["--role", "shm-send", "--ring", ring]
        send = subprocess.Popen(me + send_args)
        procs.append(send)
        out = recv.stdout.readline()
        if send.wait(timeout=seconds + 60) != 0 or recv.wait(timeout=60) != 0 or not out:
            raise SystemExit(f"{transport} {workload}: a process failed")
        return json.loads(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        path = f"/dev/shm/{ring}"
        if os.path.exists(path):
            os.unlink(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate-mbps", type=float, default=150.0, help="rated workload, MB/s")
    ap.add_argument("--transports", default="py-websocket,py-shmring")
    ap.add_argument("--workloads", default="rated,unthrottled")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ring", help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    a = ap.parse_args()
    rate = a.rate_mbps * 1e6 if a.rate_mbps > 0 else None
    if a.role == "ws-recv":
        ws_recv(a.workload)
    elif a.role == "ws-send":
        ws_send(a.port, a.seconds, rate)
    elif a.role == "shm-recv":
        shm_recv(a.ring, a.workload)
    elif a.role == "shm-send":
        shm_send(a.ring, a.seconds, rate)
    else:
        for w in a.workloads.split(","):
            if w == "rated":
                name, r = f"1080p-i420@{a.rate_mbps:g}MB/s", rate
            elif w == "unthrottled":
                name, r = "1080p-i420-unthrottled", None
            else:
                raise SystemExit(f"unknown workload {w!r}: rated or unthrottled")
            for t in a.transports.split(","):
                if t not in ("py-websocket", "py-shmring"):
                    raise SystemExit(f"unknown transport {t!r}")
                print(json.dumps(run_pair(t, name, a.seconds, r)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
