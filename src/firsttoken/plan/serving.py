"""The time a serving stack spends on a request outside its engine: the HTTP on both sides, parsing the
request and counting its tokens, scheduling it, writing the first chunk back. The engine's roofline has
none of it; a short prompt shows what it costs (docs/benchmarks.md, "The engine against published serving
measurements"). A firsttoken gateway's own time on a request it forwards is the same kind of time.

Each is a time per request and a time per thousand prompt tokens (the parse and the token count grow with
the prompt), measured per stack: plan/tables/serving_stacks.csv, each row with its source and date.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources

# The plan's self-hosted options run the simulated region's engine, so by default they carry its front end
# too: what the live region (the plan's ground truth) spends. A team on vLLM, SGLang or NIM states its own.
DEFAULT_STACK = "firsttoken-sim"
GATEWAY = "firsttoken-gateway"


@dataclass(frozen=True)
class FrontEnd:
    per_request_ms: float
    per_1k_prompt_ms: float
    source: str | None = None

    def seconds(self, prompt_tokens: int) -> float:
        return (self.per_request_ms + self.per_1k_prompt_ms * prompt_tokens / 1000) / 1000


@functools.cache
def stacks() -> dict[str, FrontEnd]:
    """The shipped table, by stack name."""
    with resources.files("firsttoken.plan").joinpath("tables", "serving_stacks.csv").open(encoding="utf-8") as f:
        return {row["stack"]: FrontEnd(float(row["per_request_ms"]), float(row["per_1k_prompt_ms"]),
                                       f"{row['source']}, {row['date']}" if row["date"] else row["source"])
                for row in csv.DictReader(f)}


def stack(name: str) -> FrontEnd:
    """A shipped stack's front end; KeyError names the ones there are."""
    try:
        return stacks()[name]
    except KeyError:
        raise KeyError(f"no shipped serving stack {name!r} (the table has {', '.join(stacks())}): give "
                       "stack: {per_request_ms, per_1k_prompt_ms, source} as measured on yours") from None
