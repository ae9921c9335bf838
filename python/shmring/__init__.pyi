from collections.abc import AsyncIterator

from ._shmring import *  # noqa: F403
from ._shmring import Consumer as _NativeConsumer
from ._shmring import Frame

class Consumer(_NativeConsumer):
    def frames(self) -> AsyncIterator[Frame]: ...
