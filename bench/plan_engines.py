"""Which distributed engine runs a `firsttoken plan --search` sweep better: the same hundred options on
this machine's processes, on a local Dask cluster and on a local Ray cluster, each with two workers.
Dask is what `--cluster` speaks; this is the measurement behind that choice. Needs `pip install
distributed ray` beside firsttoken (Ray is not one of firsttoken's dependencies).

    python bench/plan_engines.py [--hours 1] [--rate 4] [--workers 2]
"""

from __future__ import annotations

import argparse
import time

from plan_speed import grid_scenario

from firsttoken.plan.compare import compare, plan_option


def on_ray(plan, workers: int) -> list:  # type: ignore[no-untyped-def]
    import ray

    ray.init(num_cpus=workers, include_dashboard=False, logging_level="ERROR")
    try:
        task = ray.remote(plan_option)
        shared = ray.put(plan)
        return ray.get([task.remote(shared, index) for index in range(len(plan.options))])
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    plan, _ = grid_scenario(args.hours, args.rate)
    timings = {}
    started = time.perf_counter()
    reference = compare(plan, processes=args.workers)
    timings["processes"] = time.perf_counter() - started

    from distributed import LocalCluster

    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        started = time.perf_counter()  # the cluster is up: what is timed is the sweep
        dask = compare(plan, cluster=cluster.scheduler_address)
        timings["dask"] = time.perf_counter() - started
    started = time.perf_counter()
    ray = on_ray(plan, args.workers)  # ray.init starts its cluster inside: timed with the sweep
    timings["ray (its start included)"] = time.perf_counter() - started
    for name, seconds in timings.items():
        print(f"{name:>26}: {seconds:6.1f} s ({seconds / timings['processes']:.2f}× the processes')")
    print(f"the same summaries: dask {dask == reference}, ray {ray == reference}")


if __name__ == "__main__":
    main()
