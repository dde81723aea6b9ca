"""Stop signals: flags while they are caught, and a start-up that a signal ended says so."""
import os
import signal

import pytest

from mpikanel.errors import Interrupted
from mpikanel.signals import StopSignals


def test_a_signal_during_start_up_is_raised_once_the_handlers_are_restored():
    before = signal.getsignal(signal.SIGUSR1)
    stop = StopSignals(enabled=True)
    os.kill(os.getpid(), signal.SIGUSR1)         # caught: only a flag, the process lives on
    os.kill(os.getpid(), signal.SIGTERM)         # a second signal does not replace the first
    assert stop.requested() and stop.signum == signal.SIGUSR1
    with pytest.raises(Interrupted) as raised:
        stop.end_start_up()
    assert raised.value.signum == signal.SIGUSR1
    assert signal.getsignal(signal.SIGUSR1) is before


def test_a_quiet_start_up_goes_on():
    before = signal.getsignal(signal.SIGINT)
    stop = StopSignals(enabled=True)
    assert signal.getsignal(signal.SIGINT) is not before
    stop.end_start_up()
    assert not stop.requested() and signal.getsignal(signal.SIGINT) is before
