"""Test-lab utilities: reproduce the conditions firsttoken is built for (a long way from the
data centre) on one machine, so latency claims can be tested rather than asserted."""

from firsttoken.lab.delayline import DelayLine, DelayLineError

__all__ = ["DelayLine", "DelayLineError"]
