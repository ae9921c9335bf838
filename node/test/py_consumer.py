"""Consumer side of the Node -> Python test: creates the named ring, says "ready",
checks the FNV-1a checksum (first 4 bytes, over the rest) of every record and
prints one JSON line: {"records", "bytes", "bad", "order_ok"}."""

import json
import sys

import shmring


def fnv1a(b: memoryview) -> int:
    h = 0x811C9DC5
    for x in b:
        h = ((h ^ x) * 0x01000193) & 0xFFFFFFFF
    return h


def main() -> None:
    name, count = sys.argv[1], int(sys.argv[2])
    ring = shmring.Consumer(name, create=True, capacity=1 << 22)
    print("ready", flush=True)
    records = nbytes = bad = 0
    order_ok = True
    while records < count:
        frame = ring.next(timeout=20.0)
        if frame is None:
            break
        with frame:
            data = memoryview(frame)
            want = int.from_bytes(data[:4], "little")
            if fnv1a(data[4:]) != want:
                bad += 1
            if frame.flags != records:
                order_ok = False
            records += 1
            nbytes += len(data)
            data.release()
    ring.close()
    print(
        json.dumps(
            {"records": records, "bytes": nbytes, "bad": bad, "order_ok": order_ok}
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
