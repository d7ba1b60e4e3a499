"""The cyclic garbage collector paused for a block, and as it was after."""

from __future__ import annotations

import gc

import pytest

from ctxsim import collector


def test_a_pause_turns_the_collector_off_and_back_on_even_on_errors():
    with collector.paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), collector.paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with collector.paused():
            assert not gc.isenabled()
            with collector.paused():  # nested: the outer block's pause holds
                pass
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
