"""Consumer side of the Node -> Python and Go -> Python tests: creates the named
ring, says "ready", checks every record (the checked record of every cross-process
test: python/tests/_record.py) and prints one JSON line: {"records", "bytes",
"bad", "order_ok"}."""

import json
import sys
from pathlib import Path

import shmring

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python" / "tests"))
import _record


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
            index = _record.index_of(frame)
            if index is None:
                bad += 1
            if frame.flags != records or index != records:
                order_ok = False
            records += 1
            nbytes += len(frame)
    ring.close()
    print(
        json.dumps(
            {"records": records, "bytes": nbytes, "bad": bad, "order_ok": order_ok}
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
