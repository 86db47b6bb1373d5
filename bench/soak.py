"""The long soak, by hand (CI runs a minute of it in tests/server/test_soak.py): a real `firsttoken serve` as
shipped (the exact and semantic cache on, its bounded structures made small so that they fill early) in front
of the test upstream, under mixed load with cancelled streams, slow readers and clients that never read, for
`--minutes`. Prints what was asked, what was lost (nothing, or the run failed; the first 20, each with why),
and the resident memory, open file descriptors and asyncio tasks: first, highest, last, after the load, and
the slope per hour over the second half of the run.

    .venv/bin/python bench/soak.py --minutes 30
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from server.test_soak import soak_settings  # noqa: E402

from conftest import ADMIN, CLIENT_KEY  # noqa: E402
from support.gateway_process import GatewayProcess  # noqa: E402
from support.openai_upstream import UpstreamThread  # noqa: E402
from support.soak import Soak  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--every", type=float, default=10, help="seconds between samples")
    args = parser.parse_args()
    with UpstreamThread() as upstream, tempfile.TemporaryDirectory() as workdir, \
            GatewayProcess(soak_settings(upstream.url), Path(workdir)) as gateway:
        result = Soak(gateway.url, {"authorization": f"Bearer {CLIENT_KEY}"}, ADMIN, args.minutes * 60,
                      args.clients, args.every).run()
        print(result.report())
        for lost in result.lost[:20]:
            print(f"  lost: {lost}")
        for s in result.samples:
            print(f"  {s.at:7.0f} s  rss {s.rss / 2**20:7.1f} MiB  fds {s.fds:4.0f}  tasks {s.tasks:4.0f}")
        if "Traceback" in gateway.log():
            print("the gateway's log has a traceback")
    sys.exit(1 if result.lost else 0)


if __name__ == "__main__":
    main()
