"""A producer process for the tests.

Records are the checked records of every cross-process test (_record.py: index,
CRC-32 of the rest, random bytes), so the consumer can verify every byte.

    _producer.py (--name NAME [--efd M] | --fds N,M[,K] | --connect PATH) --count C
                 [--min L] [--max L] [--seed S] [--stream S] [--video WxH] [--hold]
                 [--interval SEC]

--hold: reserve one record, print "held" and sleep (to be killed mid-write).
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import _record

import shmring


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name")
    ap.add_argument("--fds", help="the ring's descriptors, in Consumer.descriptors() order")
    ap.add_argument("--efd", type=int)
    ap.add_argument("--connect")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--min", type=int, default=8)
    ap.add_argument("--max", type=int, default=65536)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--stream", type=int, default=0)
    ap.add_argument("--video")
    ap.add_argument("--hold", action="store_true")
    ap.add_argument("--interval", type=float, default=0.0)
    a = ap.parse_args()
    if a.connect is not None:
        p = shmring.Producer.connect(a.connect, timeout=10.0)
    elif a.fds is not None:
        p = shmring.Producer(fds=[int(f) for f in a.fds.split(",")], timeout=10.0)
    else:
        p = shmring.Producer(a.name, eventfd_fd=a.efd, timeout=10.0)
    if a.hold:
        r = p.reserve(4096, stream=a.stream)
        print("held", flush=True)
        time.sleep(600)
        r.abort()
        return 0
    rng = random.Random(a.seed)
    for i in range(a.count):
        if a.video:
            w, h = (int(x) for x in a.video.split("x"))
            with p.reserve_video(w, h, stream=a.stream, sequence=i) as (y, u, v):
                y[:] = i % 251
                u[:] = (i * 3) % 251
                v[:] = (i * 7) % 251
        else:
            n = rng.randint(a.min, a.max)
            p.send(_record.make(i, n, a.seed), stream=a.stream, kind=shmring.KIND_RAW)
        if a.interval:
            time.sleep(a.interval)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
