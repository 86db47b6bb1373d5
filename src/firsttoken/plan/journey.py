"""One request's journey in a plan: from the user's send, through the gateway (when there is one) and
across the network, to the option's first and last token, in virtual seconds."""

from __future__ import annotations

from dataclasses import dataclass

from firsttoken.plan.network import Route


@dataclass(slots=True, eq=False)
class Journey:
    """One request, its times in virtual seconds from the start of the run."""

    city: int  # index into the scenario's cities
    near: Route  # from the user to the gateway, or to the option when there is none
    prompt: int
    answer: int
    sent: float  # the user pressed send
    handshakes_s: float  # paid before the request could leave (0 on a connection already open)
    repeat: bool  # asked before in the same words
    paraphrase: bool = False  # asked before in other words
    recalled: bool = False  # a paraphrase that a gateway's semantic cache would find (SEMANTIC_SERVED of them)
    far: Route | None = None  # from the gateway to the option (its connections warm): None when answered at the gateway
    slow_start_s: float = 0.0  # the round trips its request waited for TCP's window to open, on every leg
    far_rounds: int = 0  # of those, the round trips on the gateway's long way
    arrived: float = 0.0  # where it is answered (the option, or the gateway's cache)
    front_end_s: float = 0.0  # the self-hosted stack's own time on it before its engine has it
    admitted: float = 0.0  # a replica started on it (its queue ends)
    cold_s: float = 0.0  # of its queue, the part spent waiting for the model to load
    first_token: float = 0.0  # where it is answered
    finished: float = 0.0  # its last token, there
    refused: bool = False  # it could never fit the replica's KV cache
    from_cache: bool = False  # answered by the gateway's edge cache: it never reached the option
    kind: str = "chat"  # the workload's kind of request (its preset) this one is
    prefix: int = 0  # leading prompt tokens every request of its kind repeats (the kind's shared prefix)
    cached: int = 0  # of its prompt, the tokens whose prefill the replica's prefix cache skipped
    gateway_s: float = 0.0  # the gateway's own time on it before the request that answered left it: the
    # paraphrase lookup, and the wait before a hedge
    sized: bool = False  # its kind is one the gateway sends to a smaller model: that option answered it
    hedged: bool = False  # its first token was slow, and the gateway sent it to the hedge's option as well
    hedge_won: bool = False  # and the hedge's first token came back first: the answer is the hedge's

    @property
    def one_way_s(self) -> float:
        """From the user to where it is answered, or back."""
        return (self.near.rtt_ms + (self.far.rtt_ms if self.far is not None else 0.0)) / 2000

    @property
    def legs(self) -> tuple[Route, ...]:
        return (self.near,) if self.far is None else (self.near, self.far)


