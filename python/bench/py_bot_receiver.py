#!/usr/bin/env python3
"""The Python receiver of `shmring bench --workload bot`: the story's receiver.

It takes the place of `shmring record --encode` in the bot workload's `py-shmring`
and `py-websocket` rows and receives every record the bot's producer sends: the
core's media header, then the planes or samples. Each video frame is touched as
the story's receiver touches it, through a numpy view over its Y plane (a sum of
every 64th byte of each row: a cheap read of the frame, the same on both
transports); each audio record through a numpy view of its samples. Nothing is
encoded.

* `--create NAME --capacity-mib N` (py-shmring): creates the ring NAME as its
  consumer (the shmring package) and takes each frame's planes as zero-copy views
  into the ring.
* `--websocket HOST:PORT` (py-websocket): a `websockets` server; each message is
  the bench's 64-byte frame header, then the media record, sent as Chromium sends
  it (masked, 131,000-byte fragments), joined by the library.

It speaks to the bench as `shmring record` does: a `{"ready": ..}` line on stdout
once it receives (with the port it listens on), then, at SIGINT or SIGTERM (after
taking what the ring or the connections still hold) or once every connection has
ended, a `{"recorded": ..}` line: `cpu_s` (this process's user and system time in
all), `max_rss_kb`, and `ring` or `websocket` with `records_consumed` (every media
record, the ends of stream included) and `frames_received` (video frames).

Needs: shmring (this package), numpy, websockets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import struct
import sys
import time
from typing import Any

import numpy as np
import numpy.typing as npt

import shmring

# Every STEP-th byte of each row of a frame's Y plane is read.
STEP = 64
# The bench's frame header before every WebSocket message (its `wire` module):
# magic, flags, sequence, capture time, record length, stream id, kind.
HDR = 64
MAGIC = 0x424D4853
# Its flag on the producer's last message of a connection (no record).
END_ALL = 2
# How long the connections may take to deliver what they hold after the stop.
DRAIN_S = 10.0


def ignore_stops() -> None:
    """The run is over: a stop from now on (the bench's, after the connections ended
    by themselves, or while the interpreter shuts down) is no failure."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


class Tally:
    """What was received, and the reads of the frames (kept, so none is skipped)."""

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.video = 0
        self.audio = 0
        self.ends = 0
        self.touched = 0

    def frame(self, y: npt.NDArray[np.uint8]) -> None:
        self.video += 1
        self.touched += int(y[:, ::STEP].sum())

    def summary(self, transport: str, elapsed: float) -> dict[str, Any]:
        r = resource.getrusage(resource.RUSAGE_SELF)
        cpu = r.ru_utime + r.ru_stime
        return {
            transport: {
                "records_consumed": self.records,
                "bytes_consumed": self.bytes,
                "frames_received": self.video,
                "audio_received": self.audio,
                "ends_of_stream": self.ends,
            },
            "elapsed_s": elapsed,
            "cpu_s": cpu,
            "cpu_percent": 100.0 * cpu / elapsed if elapsed > 0 else 0.0,
            "max_rss_kb": own_peak_rss_kb(r.ru_maxrss),
        }


def own_peak_rss_kb(fallback: int) -> int:
    """This program's own peak resident set (VmHWM): Linux keeps `ru_maxrss` across
    exec, so a process the bench starts would count the bench's own."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return fallback


# ---- the ring ----------------------------------------------------------------------


def ring(name: str, capacity_mib: int) -> None:
    stopped: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stopped.append(signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    t = Tally()
    with shmring.Consumer(name, create=True, capacity=capacity_mib << 20) as c:
        g = c.geometry()
        emit({"ready": {"ring": name, "capacity": g["capacity"], "pid": os.getpid()}})
        start = time.monotonic()
        while not stopped:
            f = c.next(timeout=0.1)
            if f is not None:
                take_frame(t, f)
        # The producer has ended: what the ring still holds is taken too.
        while (f := c.try_next()) is not None:
            take_frame(t, f)
        elapsed = time.monotonic() - start
    ignore_stops()
    emit({"recorded": t.summary("ring", elapsed)})


def take_frame(t: Tally, f: shmring.Frame) -> None:
    with f:
        t.records += 1
        t.bytes += f.nbytes
        if f.is_end:
            t.ends += 1
        elif f.is_video:
            t.frame(f.planes()[0])
        elif f.is_audio:
            t.audio += 1
            f.samples()


# ---- the WebSocket -----------------------------------------------------------------


def take_message(t: Tally, msg: bytes) -> bool:
    """Takes one message; True for the producer's last one."""
    magic, flags = struct.unpack_from("<II", msg, 0)
    if magic != MAGIC:
        raise ValueError("stream out of step: bad frame header")
    if flags & END_ALL:
        return True
    (length,) = struct.unpack_from("<Q", msg, 24)
    (kind,) = struct.unpack_from("<I", msg, 36)
    if len(msg) != HDR + length:
        raise ValueError(
            f"a message of {len(msg)} bytes whose header says {length} bytes of record"
        )
    t.records += 1
    t.bytes += length
    if length == shmring.MEDIA_HEADER_SIZE:
        # The header alone: the end of the stream.
        t.ends += 1
        return False
    record = memoryview(msg)[HDR:]
    h = shmring.parse_media_header(record)
    if kind == shmring.KIND_VIDEO:
        y: npt.NDArray[np.uint8] = np.ndarray(
            (h["height"], h["width"]),
            np.uint8,
            buffer=record,
            offset=h["offset"][0],
            strides=(h["stride"][0], 1),
        )
        t.frame(y)
    elif kind == shmring.KIND_AUDIO:
        t.audio += 1
        np.frombuffer(record, np.int16, h["size"][0] // 2, h["offset"][0])
    return False


async def websocket(addr: str) -> None:
    from websockets.asyncio.server import ServerConnection, serve
    from websockets.exceptions import ConnectionClosed

    host, _, port = addr.rpartition(":")
    t = Tally()
    conns = {"connections": 0, "ended": 0, "failed": 0}
    stop = asyncio.Event()
    all_ended = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, stop.set)

    async def handler(ws: ServerConnection) -> None:
        conns["connections"] += 1
        try:
            async for msg in ws:
                if isinstance(msg, str):
                    raise ValueError("a text message")
                if take_message(t, msg):
                    break
        except ConnectionClosed:
            pass  # the producer went away after its last message
        except Exception as e:  # noqa: BLE001  (said, and the run goes on)
            conns["failed"] += 1
            print(f"py_bot_receiver: WebSocket connection: {e}", file=sys.stderr)
        finally:
            conns["ended"] += 1
            if conns["ended"] == conns["connections"]:
                all_ended.set()

    async with serve(handler, host, int(port), max_size=None, compression=None) as server:
        local = server.sockets[0].getsockname()
        emit(
            {
                "ready": {
                    "websocket": f"{local[0]}:{local[1]}",
                    "port": local[1],
                    "pid": os.getpid(),
                }
            }
        )
        start = time.monotonic()
        ended = asyncio.ensure_future(all_ended.wait())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([ended, stopped], return_when=asyncio.FIRST_COMPLETED)
        if not ended.done() and conns["connections"] > conns["ended"]:
            # What the connections still hold is taken too.
            await asyncio.wait([ended], timeout=DRAIN_S)
        ended.cancel()
        stopped.cancel()
        elapsed = time.monotonic() - start
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(s)
    ignore_stops()
    out = t.summary("websocket", elapsed)
    out["websocket"].update(address=f"{local[0]}:{local[1]}", **conns)
    emit({"recorded": out})


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--create", metavar="NAME", help="create the ring NAME and consume it")
    how.add_argument("--websocket", metavar="HOST:PORT", help="serve WebSocket connections")
    ap.add_argument("--capacity-mib", type=int, default=64, help="the ring's capacity")
    a = ap.parse_args()
    if a.create is not None:
        ring(a.create, a.capacity_mib)
    else:
        asyncio.run(websocket(a.websocket))
    return 0


if __name__ == "__main__":
    sys.exit(main())
