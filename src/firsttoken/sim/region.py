"""A simulated region: each model served by its replicas, behind the region's limits.

Requests go to the replica that will start them soonest (see _placement), as a least-outstanding-
requests load balancer in front of vLLM replicas does. Past `max_queue` waiting
requests for a model, new ones are refused as overloaded; past a key's RPM or TPM, as rate limited.
"""

from __future__ import annotations

from collections.abc import Callable

from firsttoken.routing.ratelimit import KeyLimits, Refusal
from firsttoken.sim.catalogue import Model
from firsttoken.sim.engine import Engine, Sequence
from firsttoken.sim.faults import Faults
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
        self.faults = Faults(settings.faults)

    @property
    def models(self) -> list[str]:
        return list(self.replicas)

    @property
    def encoders(self) -> dict[str, Model]:
        """The embedding models it serves."""
        return {name: d.model for name, d in self.settings.deployments.items() if d.model.embedding_dims}

    def start(self) -> None:
        for replicas in self.replicas.values():
            for replica in replicas:
                replica.start()

    async def close(self) -> None:
        for replicas in self.replicas.values():
            for replica in replicas:
                await replica.close()

    def check_fits(self, model: str, prompt_tokens: int, max_tokens: int) -> None:
        """ValueError for a request whose prompt and longest answer no replica's KV cache could ever hold."""
        self.replicas[model][0].engine.check_fits(Sequence(prompt_tokens, max_tokens, 0.0))

    def admit(self, model: str, sequence: Sequence, api_key: str, now: float,
              on_token: Callable[[float], None], requested: int | None = None,
              blocks: list[bytes] | None = None) -> Replica:
        """Place a sequence on a replica and return it, or raise Overloaded / RateLimited / ValueError (it
        could never fit). `blocks`: its prompt's cacheable prefix (prefix_cache.block_hashes)."""
        replicas = self.replicas[model]
        replicas[0].engine.check_fits(sequence)  # before any charge: replicas share one shape
        bound = self.settings.max_queue
        if bound is not None:
            waiting = sum(r.engine.backlog() for r in replicas)
            if waiting >= bound:
                raise Overloaded(model, waiting, self.settings.overload_status)
        requested = sequence.kv_reserved if requested is None else requested  # TPM counts prompt + max_tokens
        refusal = self.limits.take(api_key, requested, now)
        if refusal is not None:
            raise RateLimited(refusal, requested)
        replica = min(replicas, key=_placement)
        replica.submit(sequence, on_token, blocks)
        return replica


def _placement(replica: Replica) -> tuple[int, int]:
    """Where a request starts soonest: a loaded replica with room now, else an unloaded one (it loads, as
    autoscalers scale out on a queue), else the loaded one with the least queued; ties by work in hand."""
    engine = replica.engine
    if not replica.loaded:
        rank = 1
    else:
        rank = 0 if engine.backlog() == 0 else 2
    return rank, len(engine.waiting) + len(engine.running)
