"""Python's cyclic garbage collector, paused while objects that all stay are made.

A collection walks every object the collector tracks in the generations it collects;
a full one walks them all. Code that makes millions of long-lived objects at once (a
context pool read from disk, a pool worker's expansion) triggers many full collections
that find nothing, each slower than the last; a timed block that runs into one measures
the collection. :func:`paused` switches the collector off for such a block.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The collector off inside the block, and as it was before after it (a block
    inside another paused one leaves it off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
