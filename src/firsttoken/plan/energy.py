"""What a self-hosted option's GPUs draw: the board's maximum power while they run steps, a tenth of it
while the model is loaded and they wait, times the facility's PUE. The maximum is an upper bound (decode,
bound by memory, draws less); the idle share is chosen (an H100 SXM loaded and waiting reads about 70 W of
its 700 in nvidia-smi). The host's CPUs, memory and network are not counted.
"""

from __future__ import annotations

IDLE_SHARE = 0.1
JOULES_PER_KWH = 3.6e6


def gpu_kwh(power_w: float, gpus_per_replica: int, busy_s: float, loaded_s: float, pue: float) -> float:
    """Energy of a run: `busy_s` and `loaded_s` are summed over replicas (a replica's time running steps,
    and its time with the model loaded, which includes the former)."""
    waiting_s = max(loaded_s - busy_s, 0.0)
    joules = power_w * gpus_per_replica * (busy_s + IDLE_SHARE * waiting_s) * pue
    return joules / JOULES_PER_KWH
