"""shmring: a zero-copy shared-memory ring for raw media between processes.

A ring has one consumer and any number of producers (threads or processes);
tethered consumers (``Consumer(name, role="tethered")``) also get every record,
and taps (``Tap(name)``) copy records read-only as they go by.
Producers reserve space, fill it in place and commit; the consumer receives
frames whose payloads stay in shared memory (``memoryview(frame)``,
``numpy.frombuffer(frame, dtype)``, ``frame.planes()``, ``frame.samples()`` are
views, never copies) until they are released.

    import shmring

    with shmring.Consumer("cam0", create=True, capacity=64 << 20) as ring:
        for frame in ring:
            with frame:
                y, u, v = frame.planes()      # numpy views into the ring
                ...

    producer = shmring.Producer("cam0")
    with producer.reserve_video(1920, 1080, stream=1) as (y, u, v):
        y[:] = 16                             # written in place, committed on exit

Frames are released by ``frame.release()``, by leaving ``with frame:``, or when
the frame and every view of it are gone. Release is *deferred* while views
exist: the record goes back to the ring only once the last memoryview/numpy
view of it is dropped, so a view never sees reused memory; after ``release()``
new views and payload reads raise ``Released``.

Errors are subclasses of ``shmring.Error`` named after what happened
(``NotFound``, ``Full``, ``Timeout``, ``Corrupt``, ``LayoutMismatch`` ...).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

try:
    from . import _shmring
except ImportError as _e:  # pragma: no cover - depends on how Python was started
    import os as _os

    _here = _os.path.dirname(_os.path.abspath(__file__))
    if any(n.startswith("_shmring") and n.endswith(".so") for n in _os.listdir(_here)):
        raise
    raise ImportError(
        f"shmring: {_here} is the package's source directory, which has no native module "
        "(_shmring): Python found it before the installed package because it runs from "
        f"{_os.path.dirname(_here)}. Run from another directory (the checkout's top one), "
        "after `pip install ./python`."
    ) from _e
from ._shmring import (
    KIND_AUDIO,
    KIND_RAW,
    KIND_VIDEO,
    LAYOUT_VERSION,
    MEDIA_HEADER_SIZE,
    MEDIA_VERSION,
    Abandoned,
    BadMediaHeader,
    Closed,
    ConfigError,
    ConsumerBusy,
    Corrupt,
    Detached,
    Error,
    EventfdRequired,
    Exists,
    Frame,
    Full,
    HandoffError,
    Kind,
    LayoutMismatch,
    Listener,
    NoConsumer,
    NoSlot,
    NoSpace,
    NoTetherLine,
    NotFound,
    NotHeld,
    Observer,
    OSFailure,
    Producer,
    Refused,
    Released,
    Reservation,
    Tap,
    TapFrame,
    Timeout,
    TooLarge,
    TooManyHeld,
    Unsealed,
    WrongThread,
    __version__,
    now_ns,
    parse_media_header,
    video_payload_len,
)

__all__ = [
    "KIND_AUDIO",
    "KIND_RAW",
    "KIND_VIDEO",
    "LAYOUT_VERSION",
    "MEDIA_HEADER_SIZE",
    "MEDIA_VERSION",
    "Abandoned",
    "BadMediaHeader",
    "Closed",
    "ConfigError",
    "Consumer",
    "ConsumerBusy",
    "Corrupt",
    "Detached",
    "Error",
    "EventfdRequired",
    "Exists",
    "Frame",
    "Full",
    "HandoffError",
    "Kind",
    "LayoutMismatch",
    "Listener",
    "NoConsumer",
    "NoSlot",
    "NoSpace",
    "NoTetherLine",
    "NotFound",
    "NotHeld",
    "Observer",
    "OSFailure",
    "Producer",
    "Refused",
    "Released",
    "Reservation",
    "Tap",
    "TapFrame",
    "Timeout",
    "TooLarge",
    "TooManyHeld",
    "Unsealed",
    "WrongThread",
    "__version__",
    "now_ns",
    "parse_media_header",
    "video_payload_len",
]


class Consumer(_shmring.Consumer):
    __doc__ = _shmring.Consumer.__doc__
    __slots__ = ()

    def frames(self) -> AsyncIterator[Frame]:
        """``async for frame in ring.frames():`` -- frames for asyncio.

        Waits on the ring's eventfd through the running loop's reader
        (``loop.add_reader``): no thread, no polling loop. The ring must have been
        created with ``eventfd=True`` (else ``EventfdRequired``). While waiting it
        re-checks with ``try_next()`` every ``liveness_interval`` so that the claim
        of a producer that died mid-write is skipped. Frames come in ring order.
        The ring's consumer only: a tethered consumer waits with ``next()``.
        """
        if self.is_tethered:
            raise ConfigError(
                f"ring {self.name}: frames() waits on the eventfd, which wakes the ring's "
                "consumer only; a tethered consumer waits with next()"
            )
        return _frames(self)


async def _frames(ring: Consumer) -> AsyncIterator[Frame]:
    efd = ring.eventfd_fileno()
    if efd is None:
        raise EventfdRequired(
            f"ring {ring.name}: frames() needs a ring created with eventfd=True "
            "(or attached with eventfd_fd=)"
        )
    loop = asyncio.get_running_loop()
    interval = ring.liveness_interval
    while not ring.closed:
        frame = ring.try_next()
        if frame is not None:
            yield frame
            continue
        if ring.arm():
            continue  # something arrived between try_next() and arm()
        ready = loop.create_future()

        def wake(fut: asyncio.Future[None] = ready) -> None:
            if not fut.done():
                fut.set_result(None)

        loop.add_reader(efd, wake)
        try:
            await asyncio.wait_for(ready, interval)
        except asyncio.TimeoutError:  # not the builtin before Python 3.11
            pass  # liveness re-check
        finally:
            loop.remove_reader(efd)
            if not ring.closed:
                ring.disarm()
