"""Run CI's own command (`.ci/run`) from fresh clones while a CPU hog keeps every core busy.

The suite must pass on the slowest day CI's machine has: this makes that day on purpose. One busy process
per core (at the suite's own priority) runs for as long as the suite does; each run starts from a fresh
clone of the committed HEAD, exactly as CI does, and the script reports each run's outcome and the time
its tests took (pytest's own summary line) beside the whole run's.

    python3 scripts/suite_under_load.py               # three runs in a row, one hog per core
    python3 scripts/suite_under_load.py --hogs 0      # the same on a quiet machine
    python3 scripts/suite_under_load.py --runs 1 --keep /tmp/clone -- -k cache   # pytest arguments after --

It stops at the first failing run (the point is three passes in a row) and exits with its status.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUMMARY = re.compile(r"^=+ (?P<outcome>.*) in (?P<seconds>[\d.]+)s", re.MULTILINE)


def _spin() -> None:
    while True:
        pass


def start_hogs(count: int) -> list[multiprocessing.Process]:
    hogs = [multiprocessing.Process(target=_spin, daemon=True, name=f"hog-{i}") for i in range(count)]
    for hog in hogs:
        hog.start()
    return hogs


def fresh_clone(into: Path) -> Path:
    """A clone of the committed HEAD (what CI checks out: nothing uncommitted, no build outputs)."""
    subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(into)], check=True)
    return into


def run_ci(checkout: Path, pytest_args: list[str], log: Path) -> tuple[int, float, str]:
    """CI's command in `checkout`: its exit status, its wall time and pytest's summary line."""
    env = {**os.environ, "CI": "true"}
    if pytest_args:
        env["PYTEST_ADDOPTS"] = " ".join(pytest_args)
    started = time.monotonic()
    with open(log, "wb") as out:
        status = subprocess.run(["bash", ".ci/run"], cwd=checkout, env=env, stdout=out,
                                stderr=subprocess.STDOUT).returncode
    elapsed = time.monotonic() - started
    summaries = list(SUMMARY.finditer(log.read_text(errors="replace")))
    summary = (f"{summaries[-1]['outcome']} in {float(summaries[-1]['seconds']) / 60:.1f} min of tests"
               if summaries else "no pytest summary")
    return status, elapsed, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs in a row (default 3)")
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 1,
                        help="busy processes beside the suite (default: one per core)")
    parser.add_argument("--keep", type=Path, help="clone here and keep it and the logs (default: a temporary folder)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()

    base = args.keep or Path(tempfile.mkdtemp(prefix="firsttoken-suite-"))
    base.mkdir(parents=True, exist_ok=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    print(f"commit {head.strip()}, {os.cpu_count()} cores, {args.hogs} busy processes beside the suite, "
          f"{args.runs} runs; logs in {base}", flush=True)
    hogs = start_hogs(args.hogs)
    status = 0
    try:
        for run in range(1, args.runs + 1):
            checkout = base / f"run-{run}"
            shutil.rmtree(checkout, ignore_errors=True)
            fresh_clone(checkout)
            status, elapsed, summary = run_ci(checkout, args.pytest_args, base / f"run-{run}.log")
            print(f"run {run}: {'passed' if status == 0 else f'FAILED (exit {status})'}: {summary}; "
                  f"{elapsed / 60:.1f} min with the install", flush=True)
            if status != 0:
                break
    finally:
        for hog in hogs:
            hog.terminate()
    if status == 0 and args.keep is None:
        shutil.rmtree(base, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
