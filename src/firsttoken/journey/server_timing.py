"""Reading a `Server-Timing` header (or the `: server-timing` comment that ends a stream): the phases the hop
that answered says it spent, and the round trip it says lies beyond the socket we measured."""

from __future__ import annotations


def parse_server_timing(header: str | None) -> dict[str, float]:
    """`queue;dur=1.2, cold;dur=0, prefill;dur=30` → {"queue": 1.2, "cold": 0.0, "prefill": 30.0}."""
    timings: dict[str, float] = {}
    for part in (header or "").split(","):
        name, _, params = part.strip().partition(";")
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key == "dur" and name:
                try:
                    timings[name] = float(value.strip('"'))
                except ValueError:
                    pass
    return timings


def beyond_socket_ms(declared: dict[str, float]) -> float:
    """The round trip past the hop we are connected to, as it declares it: a simulated region's `distance`
    (the fibre it stands for), and a firsttoken gateway's `rtt` to its own upstream. A gateway is told by
    its own vocabulary (`gateway` beside `rtt`): another server's `rtt` may be the very path we measured."""
    beyond = declared.get("distance", 0.0)
    if "gateway" in declared:
        beyond += declared.get("rtt", 0.0)
    return beyond
