"""A simulated region: each model served by its replicas, behind the region's limits.

Requests go to the replica that will start them soonest: a loaded one before one that would have to
load its model back, then the one with the least work queued (waiting and running sequences), as a
least-outstanding-requests load balancer in front of vLLM replicas does. Past `max_queue` waiting
requests for a model, new ones are refused as overloaded; past a key's RPM or TPM, as rate limited.
"""

from __future__ import annotations

from collections.abc import Callable

from firsttoken.sim.engine import Engine, Sequence
from firsttoken.sim.ratelimit import KeyLimits, Refusal
from firsttoken.sim.replica import Replica
from firsttoken.sim.settings import SimSettings


class Overloaded(Exception):
    """The model's queue is at its bound; the message says so for the client."""

    def __init__(self, model: str, waiting: int, status: int) -> None:
        super().__init__(f"{model} is overloaded: {waiting} requests are already waiting. Retry shortly.")
        self.status = status


class RateLimited(Exception):
    def __init__(self, refusal: Refusal, requested: int) -> None:
        self.refusal = refusal
        if refusal.retry_after_s == float("inf"):
            message = (f"Request too large: {requested} tokens (prompt + max_tokens) exceed the limit of "
                       f"{refusal.allowed} tokens per minute. Lower max_tokens or shorten the prompt.")
        else:
            unit = "requests" if refusal.limit == "requests" else "tokens"
            message = (f"Rate limit reached: {refusal.allowed} {unit} per minute for this API key. "
                       f"Retry after {refusal.retry_after} s.")
        super().__init__(message)




class Region:
    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self.replicas: dict[str, list[Replica]] = {
            name: [Replica(Engine(deployment, token_budget=settings.token_budget, max_batch=settings.max_batch),
                           idle_unload_s=settings.idle_unload, load_s=settings.load_s(deployment))
                   for _ in range(settings.replicas)]
            for name, deployment in settings.deployments.items()
        }
        self.limits = KeyLimits(settings.rpm, settings.tpm)
        self.one_way_s = settings.one_way_s

    @property
    def models(self) -> list[str]:
        return list(self.replicas)

    def start(self) -> None:
        for replicas in self.replicas.values():
            for replica in replicas:
                replica.start()

    async def close(self) -> None:
        for replicas in self.replicas.values():
            for replica in replicas:
                await replica.close()

    def admit(self, model: str, sequence: Sequence, api_key: str, now: float,
              on_token: Callable[[float], None]) -> Replica:
        """Place a sequence on a replica and return it, or raise Overloaded / RateLimited / ValueError (it
        could never fit)."""
        replicas = self.replicas[model]
        replicas[0].engine.check_fits(sequence)  # before any charge: replicas share one shape
        bound = self.settings.max_queue
        if bound is not None:
            waiting = sum(len(r.engine.waiting) for r in replicas)
            if waiting >= bound:
                raise Overloaded(model, waiting, self.settings.overload_status)
        requested = sequence.kv_reserved
        refusal = self.limits.take(api_key, requested, now)
        if refusal is not None:
            raise RateLimited(refusal, requested)
        replica = min(replicas, key=lambda r: (not r.loaded, len(r.engine.waiting) + len(r.engine.running)))
        replica.submit(sequence, on_token)
        return replica
