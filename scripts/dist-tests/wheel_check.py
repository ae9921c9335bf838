"""Run by scripts/test-dist.sh in a new virtual environment where the wheel was
installed, with no Rust toolchain on PATH: one video frame through a ring."""

import sys

import shmring

version, layout = sys.argv[1], int(sys.argv[2])
assert shmring.__version__ == version, shmring.__version__
assert shmring.LAYOUT_VERSION == layout, shmring.LAYOUT_VERSION
assert "site-packages" in shmring.__file__, shmring.__file__

ring = shmring.Consumer("dist-test", create=True, memfd=True, capacity=1 << 20)
cam = shmring.Producer(ring=ring)
with cam.reserve_video(64, 48, stream=3) as (y, u, v):
    y[:], u[:], v[:] = 16, 128, 128
frame = ring.next(timeout=1.0)
assert frame is not None
with frame:
    assert frame.kind is shmring.Kind.VIDEO and frame.stream == 3
    y, u, v = frame.planes()
    assert y.shape == (48, 64) and int(y.min()) == int(y.max()) == 16
cam.close()
ring.close()
print(
    f"shmring {shmring.__version__} (layout version {layout}) from {shmring.__file__}: one frame"
)
