"""Running wrk and reading its latency distribution."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}
CLIENT_KEY = "sk-bench-client-key"


@dataclass
class WrkResult:
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    assert match, text
    return float(match.group(1)) * _UNITS[match.group(2)]


def run(url: str, body: str, connections: int, seconds: float, workdir: Path, threads: int = 1,
        prefix: list[str] | None = None, headers: dict[str, str] | None = None) -> WrkResult:
    script = workdir / "post.lua"
    extra = "".join(f'wrk.headers["{name}"] = "{value}"\n' for name, value in (headers or {}).items())
    script.write_text(f"""
wrk.method = "POST"
wrk.body = [=[{body}]=]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {CLIENT_KEY}"
{extra}""")
    out = subprocess.run([*(prefix or []), "wrk", f"-t{threads}", f"-c{connections}", f"-d{int(seconds)}s", "--latency",
                          "--timeout", "10s",
                          "-s", str(script), url], capture_output=True, text=True, check=True).stdout
    latency = dict(re.findall(r"^\s*(50|99)(?:\.0+)?%\s+([\d.]+(?:us|ms|s))\s*$", out, re.M))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", out))
    errors += sum(int(n) for n in re.findall(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                                             out)[0]) if "Socket errors" in out else 0
    nan = float("nan")  # no request completed: wrk prints no distribution
    return WrkResult(rps, _ms(latency["50"]) if "50" in latency else nan,
                     _ms(latency["99"]) if "99" in latency else nan, errors)
