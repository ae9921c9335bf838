"""Consumer side of the Node-over-a-socket test: serves a sealed memfd ring on the
Unix socket argv[1] (to this user), says "ready", counts records until argv[2]
arrived, prints one JSON line {"records", "bytes", "refused"} and exits."""

import json
import sys

import shmring


def main() -> None:
    path, count = sys.argv[1], int(sys.argv[2])
    ring = shmring.Consumer("node-listener", create=True, memfd=True, capacity=1 << 22)
    with shmring.Listener(ring, path) as listener:
        print("ready", flush=True)
        records = nbytes = 0
        while records < count:
            frame = ring.next(timeout=20.0)
            if frame is None:
                break
            with frame:
                records += 1
                nbytes += len(frame)
        stats = listener.stats()
    print(json.dumps({"records": records, "bytes": nbytes, "refused": stats["refused"]}), flush=True)


if __name__ == "__main__":
    main()
