"""Consumer/producer round trips, metadata, media views, zero copy."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import shmring


def inside(ring: shmring.Consumer, addr: int, n: int) -> bool:
    base, length = ring.mapping()
    return base <= addr and addr + n <= base + length


def test_round_trip_metadata_and_buffer(ring_name: str) -> None:
    with shmring.Consumer(ring_name, create=True, capacity=1 << 20) as ring:
        p = shmring.Producer(ring_name)
        p.send(b"hello world", stream=7, kind=0, timestamp=1234, flags=5)
        with p.reserve(3000, stream=8, kind=42) as buf:
            buf[:] = bytes(i % 256 for i in range(3000))
        f = ring.next(timeout=1.0)
        assert f is not None
        assert (f.stream, f.kind, f.timestamp, f.flags, len(f)) == (7, 0, 1234, 5, 11)
        assert bytes(memoryview(f)) == b"hello world"
        assert f.tobytes() == b"hello world"
        assert f.format is None and f.header() is None and f.sequence == f.seq
        f.release()
        g = ring.next(timeout=1.0)
        assert g is not None and (g.stream, g.kind) == (8, 42)
        assert np.array_equal(np.frombuffer(g, np.uint8), np.arange(3000) % 256)
        assert g.timestamp > 0
        g.release()
        assert ring.try_next() is None
        assert ring.next(timeout=0.01) is None
        s = ring.stats()
        assert s["records_committed"] == 2 and s["records_consumed"] == 2
        p.close()


def test_iteration_and_context_manager(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    for i in range(5):
        p.send(bytes([i]) * 100, stream=i)
    got = []
    for frame in ring:
        with frame:
            got.append((frame.stream, memoryview(frame)[0]))
        if len(got) == 5:
            break
    assert got == [(i, i) for i in range(5)]
    assert ring.frames_alive == 0
    ring.close()
    assert ring.closed
    with pytest.raises(shmring.Closed):
        ring.next(timeout=0)


def test_zero_copy_views_point_into_the_ring(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 22)
    p = shmring.Producer(ring=ring)
    res = p.reserve(4096, stream=1)
    arr_w = res.array()
    arr_w[:] = 7
    res_addr = res.address
    res.commit()
    assert not arr_w.flags.writeable  # the producer's array is read-only after commit

    f = ring.next(timeout=1.0)
    assert f is not None
    a = np.frombuffer(f, np.uint8)
    m = memoryview(f)
    # The consumer's views are the very bytes the producer wrote: same address,
    # inside the ring's mapping.
    assert f.address == res_addr
    assert a.ctypes.data == f.address
    assert inside(ring, a.ctypes.data, a.nbytes)
    assert not a.flags.writeable and m.readonly
    assert (a == 7).all()
    # Writing into ring memory is seen by the consumer's existing views: no copy.
    ctypes.memset(f.address, 0xAB, 16)
    assert (a[:16] == 0xAB).all() and m[0] == 0xAB and f.array()[15] == 0xAB
    del a, m
    f.release()


def test_write_through_video_reservation_is_seen_by_consumer_planes(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 24)
    p = shmring.Producer(ring=ring)
    w, h = 640, 360
    with p.reserve_video(w, h, stream=3, sequence=41, pts_ns=99) as (y, u, v):
        y[:] = np.arange(w, dtype=np.uint8)[None, :]
        u[:] = 100
        v[:] = 200
        y_addr = y.ctypes.data
    f = ring.next(timeout=1.0)
    assert f is not None and f.is_video and not f.is_audio
    assert (f.format, f.width, f.height, f.sequence, f.pts_ns) == ("i420", w, h, 41, 99)
    assert f.kind == shmring.KIND_VIDEO and f.plane_count == 3
    assert len(f) == shmring.video_payload_len(w, h)
    Y, U, V = f.planes()
    assert Y.shape == (h, w) and U.shape == (h // 2, w // 2) and V.shape == (h // 2, w // 2)
    assert Y.strides == (w, 1) and U.strides == (w // 2, 1)
    assert Y.ctypes.data == y_addr  # the producer's plane, in place
    for plane in (Y, U, V):
        assert inside(ring, plane.ctypes.data, plane.nbytes)
        assert not plane.flags.writeable
    assert (Y[17] == np.arange(w, dtype=np.uint8)).all()
    assert (U == 100).all() and (V == 200).all()
    hd = f.header()
    assert hd is not None and hd["offset"][0] == shmring.MEDIA_HEADER_SIZE
    assert shmring.parse_media_header(memoryview(f))["width"] == w
    del Y, U, V
    f.release()


def test_numbering_frame_rate_and_end_of_stream(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    for _ in range(3):  # numbered by the producer, per stream and kind
        with p.reserve_video(32, 16, stream=5, fps=(25, 1)) as planes:
            for pl in planes:
                pl[:] = 0
    with p.reserve_audio(10, stream=5) as pcm:
        pcm[:] = 0
    p.end_stream(stream=5, kind=shmring.KIND_VIDEO)
    with pytest.raises(shmring.ConfigError):
        p.end_stream(stream=5, kind=shmring.KIND_RAW)
    got = []
    while (f := ring.next(timeout=0.5)) is not None:
        with f:
            got.append((f.kind, f.sequence, f.is_end, f.fps, f.media_error))
    v, a = shmring.KIND_VIDEO, shmring.KIND_AUDIO
    assert got == [
        (v, 0, False, (25, 1), None),
        (v, 1, False, (25, 1), None),
        (v, 2, False, (25, 1), None),
        (a, 0, False, None, None),
        (v, 3, True, None, None),
    ]
    assert shmring.MEDIA_VERSION == 2


@pytest.mark.parametrize(
    "fmt,width,height,shapes",
    [
        ("nv12", 64, 36, [(36, 64), (18, 32, 2)]),
        ("rgba", 64, 36, [(36, 64, 4)]),
        # Odd sizes, from the core's plane table: chroma is ceil(w/2) x ceil(h/2).
        ("i420", 65, 37, [(37, 65), (19, 33), (19, 33)]),
        ("NV12", 65, 37, [(37, 65), (19, 33, 2)]),
        ("rgba", 65, 37, [(37, 65, 4)]),
    ],
)
def test_video_formats_and_sizes(
    ring_name: str, fmt: str, width: int, height: int, shapes: list[tuple[int, ...]]
) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    with p.reserve_video(width, height, format=fmt) as planes:
        assert [pl.shape for pl in planes] == shapes
        for i, pl in enumerate(planes):
            pl[:] = i + 1
    f = ring.next(timeout=1.0)
    assert f is not None and f.format == fmt.lower()
    got = f.planes()
    assert [g.shape for g in got] == shapes
    for i, g in enumerate(got):
        assert (g == i + 1).all()
    del got
    f.release()


def test_format_aliases_and_names(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    with p.reserve_audio(10, channels=1, sample_rate=48000, format="S16") as pcm:
        pcm[:] = 1
    f = ring.next(timeout=1.0)
    assert f is not None and f.format == "pcm_s16"
    f.release()
    with pytest.raises(shmring.ConfigError, match="i420, nv12, rgba, pcm_s16"):
        shmring.video_payload_len(64, 64, format="yuv9")


@pytest.mark.parametrize("fmt,dtype", [("pcm_s16", np.int16), ("pcm_f32", np.float32)])
def test_audio_samples(ring_name: str, fmt: str, dtype: type) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    data = (np.arange(480 * 2).reshape(480, 2) % 1000).astype(dtype)
    with p.reserve_audio(480, channels=2, sample_rate=48000, format=fmt, sequence=3) as pcm:
        assert pcm.shape == (480, 2) and pcm.dtype == dtype
        pcm[:] = data
    f = ring.next(timeout=1.0)
    assert f is not None and f.is_audio
    assert (f.sample_rate, f.channels, f.samples_per_channel, f.sequence) == (48000, 2, 480, 3)
    s = f.samples()
    assert s.dtype == dtype and s.shape == (480, 2)
    assert np.array_equal(s, data)
    assert inside(ring, s.ctypes.data, s.nbytes)
    with pytest.raises(shmring.BadMediaHeader):
        f.planes()
    del s
    f.release()


def test_memfd_ring_and_fd_attach(ring_name: str) -> None:
    import os

    ring = shmring.Consumer("pytest-memfd", create=True, memfd=True, capacity=1 << 20)
    assert ring.name.startswith("memfd:")
    # A memfd ring's producers need its lock file too, and are told so.
    with pytest.raises(shmring.ConfigError, match="lock file"):
        shmring.Producer(fd=os.dup(ring.fileno()))
    fds = ring.descriptors()
    assert len(fds) == 2 and fds[0] == ring.fileno()
    p = shmring.Producer(fds=[os.dup(f) for f in fds])
    p.send(b"x" * 10)
    f = ring.next(timeout=1.0)
    assert f is not None and f.tobytes() == b"x" * 10
    f.release()
    p.close()
    ring.close()


def test_producer_policies(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    p = shmring.Producer(ring=ring, on_full="fail")
    assert p.on_full == "fail" and p.timeout is None
    with pytest.raises(shmring.TooLarge, match="max_record"):
        p.send(bytes(p.max_record + 1))
    sent = 0
    with pytest.raises(shmring.Full, match="full"):
        while True:
            p.send(bytes(4000))
            sent += 1
    assert sent > 0
    p.set_policy("block", 0.05)
    assert p.on_full == "block" and p.timeout == pytest.approx(0.05)
    with pytest.raises(shmring.Timeout, match="timed out"):
        p.send(bytes(4000))
    with pytest.raises(shmring.Full):
        p.send(bytes(4000), timeout=0)
    assert ring.stats()["drops_full"] >= 3
    # Consuming frees space again.
    for _ in range(sent):
        f = ring.next(timeout=1.0)
        assert f is not None
        f.release()
    p.send(bytes(4000), timeout=0)


def test_reservation_aborts_on_exception(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    with pytest.raises(RuntimeError):
        with p.reserve(100, stream=1) as buf:
            buf[:4] = b"abcd"
            raise RuntimeError("boom")
    with pytest.raises(shmring.Released):
        buf_res = p.reserve(10)
        buf_res.abort()
        buf_res.commit()
    p.send(b"after", stream=2)
    f = ring.next(timeout=1.0)
    assert f is not None and f.stream == 2 and f.tobytes() == b"after"
    f.release()
    assert ring.stats()["records_aborted"] == 2


def test_one_reservation_at_a_time_and_buffer_exports(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    r = p.reserve(64)
    with pytest.raises(shmring.Error, match="open reservation"):
        p.reserve(64)
    m = memoryview(r)
    m[:] = b"z" * 64
    with pytest.raises(BufferError):
        r.commit()  # a view still exists: the space stays ours
    assert r.open
    del m
    r.commit()
    f = ring.next(timeout=1.0)
    assert f is not None and f.tobytes() == b"z" * 64
    f.release()
    # The memoryview given by `with` is released at the end of the block.
    with p.reserve(8) as buf:
        buf[:] = b"12345678"
    with pytest.raises(ValueError):
        buf[0]  # noqa: B018


def test_package_documents_itself() -> None:
    import importlib.resources
    import pydoc

    doc = shmring.Frame.__doc__ or ""
    assert "deferred" in doc.lower() and "Released" in doc
    text = pydoc.render_doc(shmring.Consumer)
    for needle in ("next(timeout=None)", "frames()", "create=True", "mapping()"):
        assert needle in text, needle
    assert "reserve_video" in pydoc.render_doc(shmring.Producer)
    pkg = importlib.resources.files("shmring")
    assert pkg.joinpath("py.typed").is_file()
    # The native module's stubs; the package's own Python is annotated inline.
    assert pkg.joinpath("_shmring.pyi").is_file() and not pkg.joinpath("__init__.pyi").exists()
