"""Instructions per call of each piece of the journey X-ray's per-request work, counted by valgrind
(callgrind): each piece runs N and 2N times in a process of its own, and the difference over N, less the
same for an empty loop, is its cost.

    .venv/bin/python bench/xray_pieces.py [--calls 2000]

Run by hand; CI never runs it. Needs valgrind.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile

PIECES = {
    "timeline": "a Timeline made",
    "timing": "the Server-Timing header and the stream's closing comment",
    "phases": "phases() of a finished stream",
    "metrics": "Metrics.observe (phases excluded)",
    "row": "the log's row (phases excluded)",
    "insert": "the log's SQLite insert of that row, in batches of 256 (row and phases excluded)",
    "recent": "RecentJourneys.add",
}


def run_piece(piece: str, calls: int) -> None:
    """In the measured process: make `calls` finished timelines, then do `piece` to each."""
    from firsttoken.journey.attribution import phases
    from firsttoken.journey.log import JourneyLog, row
    from firsttoken.journey.metrics import Metrics
    from firsttoken.journey.recent import RecentJourneys
    from firsttoken.journey.tcp_info import Rtt
    from firsttoken.journey.timeline import Timeline

    def finished(i: int) -> Timeline:
        t = Timeline(f"req_abcdef123456{i:x}")
        t.tenant, t.status, t.upstream, t.route, t.model, t.stream = "bench", 200, "sse", "sse/bench", "bench", True
        t.sent, t.first_byte = t.received + 0.0003, t.received + 0.0013
        t.first_token, t.last_token = t.first_byte, t.first_byte + 0.001
        t.last_byte, t.token_events, t.output_tokens, t.input_tokens = t.last_token, 10, 10, 5
        t.client_rtt = t.upstream_rtt = Rtt(0.05, 0.03)
        return t

    metrics, recent = Metrics(), RecentJourneys(10_000)
    timelines = [finished(i) for i in range(calls)]
    done = [phases(t)[0] for t in timelines] if piece in ("metrics", "row", "insert") else []
    journey_log = JourneyLog(tempfile.mkdtemp() + "/journeys.db", 1_000_000, 86_400) if piece == "insert" else None
    pending: list = []
    for i, t in enumerate(timelines):
        if piece == "timeline":
            Timeline("req")
        elif piece == "timing":
            t.server_timing()
            t.closing_comment()
        elif piece == "phases":
            phases(t)
        elif piece == "metrics":
            metrics.observe(t, done[i])
        elif piece == "row":
            row(t, done[i], 1.0)
        elif piece == "insert":
            pending.append(row(t, done[i], 1.0))
            if len(pending) == 256:
                journey_log.write(pending)
                pending = []
        elif piece == "recent":
            recent.add(t)


def counted(piece: str, calls: int) -> int:
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
                          "--piece", piece, "--calls", str(calls)], capture_output=True, text=True, check=True)
    match = re.search(r"Collected : (\d+)", out.stderr)
    assert match, out.stderr[-2000:]
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--piece", help=argparse.SUPPRESS)  # set when this script measures itself
    args = parser.parse_args()
    if args.piece is not None:
        run_piece(args.piece, args.calls)
        return

    def per_call(piece: str) -> float:
        return (counted(piece, 2 * args.calls) - counted(piece, args.calls)) / args.calls

    empty = per_call("none")
    costs: dict[str, float] = {}
    print("| piece | instructions per call |")
    print("|---|---|")
    for piece, what in PIECES.items():
        costs[piece] = per_call(piece) - empty
        if piece in ("metrics", "row", "insert"):  # their process also ran phases() once a call, to feed them
            costs[piece] -= costs["phases"]
        if piece == "insert":
            costs[piece] -= costs["row"]
        print(f"| {what} | {costs[piece]:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
