"""decice.interrupt: SIGINT/SIGTERM handlers for a run, restored after it."""

from __future__ import annotations

import os
import signal

import pytest

from decice import interrupt

pytestmark = pytest.mark.unit


def _handlers() -> dict[signal.Signals, object]:
    return {sig: signal.getsignal(sig) for sig in interrupt.SIGNALS}


@pytest.mark.parametrize("sig", interrupt.SIGNALS)
def test_first_signal_raises_later_ones_only_flag(sig: signal.Signals) -> None:
    before = _handlers()
    with pytest.raises(KeyboardInterrupt), interrupt.handling():
        assert not interrupt.requested()
        try:
            os.kill(os.getpid(), sig)
            pytest.fail("the first signal did not interrupt")
        except KeyboardInterrupt:
            assert interrupt.requested() and interrupt.signal_name() == sig.name
            os.kill(os.getpid(), sig)  # cleanup is not cut short by a second one
            os.kill(os.getpid(), signal.SIGINT)
            raise
    assert _handlers() == before
    assert not interrupt.requested() and interrupt.signal_name() == ""


def test_shielded_holds_a_signal_until_the_block_ends() -> None:
    steps = []
    with pytest.raises(KeyboardInterrupt), interrupt.handling():
        with interrupt.shielded():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("finished the shielded block")
        steps.append("not reached")
    assert steps == ["finished the shielded block"]


def test_shielded_without_delivery_only_flags() -> None:
    with interrupt.handling():
        with interrupt.shielded(deliver=False):
            os.kill(os.getpid(), signal.SIGINT)
        assert interrupt.requested()
    assert not interrupt.requested()


def test_outside_handling_nothing_is_installed_or_raised() -> None:
    before = _handlers()
    with interrupt.shielded():
        pass
    assert _handlers() == before and not interrupt.requested()
