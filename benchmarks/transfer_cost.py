"""What moving boundary observations costs per chunk: shared memory (process executor) against Ray's object
store (Ray executor), with the env worker on the driver's node and on another node of a local Ray cluster.

Layout of the bench's all-optimisations row: the reference simulator at 224x224 (three cameras, rgb +
proprio), E = 2 envs per worker, chunks of N = 32 actions, hybrid K = 2 (a chunk steps one stage slice of
E / K = 1 env) and, for comparison, whole-worker chunks of E = 2 envs (process partition).

Per chunk, the worker steps it and publishes its boundary observations (``write_obs``: into shared memory,
or stacked into the reply that Ray stores); the harness waits until the reply is ready (pipe readable /
``ray.wait(fetch_local=False)``), then times ``executor.collect(worker, out)``: the pipe message and the
copy out of shared memory, or Ray's fetch (pulled from the other node's object store, deserialized) and
the copy into the engine's batch ``out``. That is the driver's transfer cost of one chunk; the worker's
stepping is not in it. Both executors are the engine's own (``make_executor("process")``,
``make_executor("ray")`` with a node-id placement); the harness waits with ``executor.ready`` to know when
the worker is done.

The "other node" is a second raylet with its own object store on the same machine
(``ray.cluster_utils.Cluster``): the bytes cross Ray's object manager over loopback, not a network; on a
real cluster add bytes / bandwidth (0.45 MB per env per chunk: 0.36 ms at 10 Gb/s).

Writes ``transfer_<machine>.json`` and ``.png`` to ``./behavior1k_fast_results`` (``--out-dir``; ``--record``: the
checkout's ``benchmarks/results/``). Run (about two minutes on 2 cores):
``python3 benchmarks/transfer_cost.py``.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

import numpy as np

from behavior1k_fast.backends import make_factory
from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.core.tracing import get_profiler
from behavior1k_fast.rollout import PartitionPlan
from behavior1k_fast.rollout.protocol import Chunk, Ok, Reset
from behavior1k_fast.rollout.supervision import Supervision, Supervisor
from behavior1k_fast.rollout.transports import make_executor
from behavior1k_fast.rollout.worker import WorkerSpec
from behavior1k_fast.tools.argtypes import Parser, chunk_steps, env_count, nonnegative_int, parse_checked, positive_int
from behavior1k_fast.tools.backend_args import check_image_memory
from behavior1k_fast.tools.measure.config import add_output_arguments, checked_output_dir
from behavior1k_fast.tools.measure.files import write_json
from behavior1k_fast.tools.measure.machine import describe_machine, machine_tag

TRANSPORTS = ("shared memory (process executor)", "Ray object store, same node", "Ray object store, other node")


def worker_profile(envs: int, stages: int, chunk: int) -> RolloutProfile:
    """The profile of the one env worker: ``envs`` envs in ``stages`` hybrid stages, chunks of ``chunk``
    actions (ValueError for a layout the engine refuses)."""
    profile = RolloutProfile(num_env_processes=1, total_num_envs=envs, pipeline_stages=stages, chunk_size=chunk)
    PartitionPlan.from_profile(profile)
    return profile


def worker_spec(resolution: int, envs: int, stages: int, chunk: int) -> WorkerSpec:
    """One env worker of the bench layout, with tracing on (its spans come back with every reply)."""
    factory = make_factory("reference", resolution=resolution)
    profile = worker_profile(envs, stages, chunk)
    return WorkerSpec(0, pickle.dumps(factory), envs, 0, profile.to_dict(), True, tracing=True)


def measure(executor: Supervisor, rows: tuple[int, ...], chunks: int, warmup: int, seed: int = 0) -> dict:
    """Per-chunk driver transfer time (``collect``), the worker's publish time and the bytes moved."""
    profiler = get_profiler()
    obs_space, action_space = executor.start()
    try:
        executor.submit(0, Reset(tuple(range(executor.specs[0].num_envs))))
        executor.collect(0)
        out = {k: np.empty((len(rows), *s.shape), s.dtype) for k, s in obs_space.spaces.items()}
        rng = np.random.default_rng(seed)
        steps = executor.specs[0].profile["chunk_size"]
        fetch, publish, chunk_ms, reply_bytes = [], [], [], []
        for i in range(warmup + chunks):
            actions = rng.uniform(action_space.low, action_space.high, (len(rows), steps, *action_space.shape))
            profiler.clear()
            executor.submit(0, Chunk(rows, actions.astype(np.float32), steps))
            executor.ready([0], None)
            start = time.perf_counter()
            result, obs = executor.collect(0, out)
            elapsed = time.perf_counter() - start
            if i < warmup:
                continue
            fetch.append(elapsed * 1e3)
            publish.append(sum(s[2] for s in profiler.spans if (s[5] or {}).get("command") == "write_obs") / 1e6)
            chunk_ms.append(float(result.env_wall_seconds.max()) * 1e3)
            in_reply = None if executor.pids else obs  # process workers leave obs in shared memory
            reply_bytes.append(len(pickle.dumps(Ok((result, in_reply)), protocol=5)))
    finally:
        executor.close()
    obs_bytes = int(sum(a.nbytes for a in out.values()))
    q = lambda xs, p: float(np.percentile(xs, p))  # noqa: E731
    return {
        "rows_per_chunk": len(rows), "chunks": chunks, "obs_bytes": obs_bytes, "reply_bytes": int(np.median(reply_bytes)),
        "fetch_ms_median": q(fetch, 50), "fetch_ms_p10": q(fetch, 10), "fetch_ms_p90": q(fetch, 90),
        "publish_ms_median": q(publish, 50), "chunk_ms_median": q(chunk_ms, 50),
        "obs_mb_per_s": obs_bytes / 1e6 / (q(fetch, 50) / 1e3),
    }


def run(args: argparse.Namespace) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    spec = worker_spec(args.resolution, args.envs_per_process, args.pipeline_stages, args.chunk_size)
    # one stage's envs and all of them (one set when K = 1)
    row_sets = list(dict.fromkeys([tuple(range(args.envs_per_process // args.pipeline_stages)),
                                   tuple(range(args.envs_per_process))]))
    results = []
    for rows in row_sets:
        results.append({"transport": TRANSPORTS[0], **measure(make_executor("process", [spec], Supervision()), rows,
                                                             args.chunks, args.warmup)})
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        other = cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR")
        for transport, node in zip(TRANSPORTS[1:], (cluster.head_node.node_id, other.node_id)):
            for rows in row_sets:
                executor = make_executor("ray", [spec], Supervision(), {"num_cpus": 1}, (node,))
                results.append({"transport": transport, **measure(executor, rows, args.chunks, args.warmup)})
    finally:
        ray.shutdown()
        cluster.shutdown()
    machine = describe_machine("cpu")
    return {
        "what": "driver's per-chunk transfer of boundary observations (collect after the reply is ready)",
        "command": "python3 benchmarks/transfer_cost.py",
        "layout": {"backend": "reference", "resolution": args.resolution, "envs_per_process": args.envs_per_process,
                   "stages": args.pipeline_stages, "chunk_size": args.chunk_size, "modalities": ["rgb", "proprio"]},
        "machine": machine,
        "results": results,
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8))
    rows = sorted({r["rows_per_chunk"] for r in result["results"]})
    width = 0.8 / len(TRANSPORTS)
    for i, transport in enumerate(TRANSPORTS):
        entries = [next(r for r in result["results"] if r["transport"] == transport and r["rows_per_chunk"] == n)
                   for n in rows]
        xs = [x + (i - 1) * width for x in range(len(rows))]
        med = [e["fetch_ms_median"] for e in entries]
        err = [[m - e["fetch_ms_p10"] for m, e in zip(med, entries)], [e["fetch_ms_p90"] - m for m, e in zip(med, entries)]]
        ax.bar(xs, med, width=width, yerr=err, capsize=3, label=transport)
        for x, e in zip(xs, entries):
            ax.annotate(f"{e['fetch_ms_median']:.2f}", (x, e["fetch_ms_p90"]), ha="center", va="bottom", fontsize=8)
    layout = result["layout"]
    chunk = [r["chunk_ms_median"] for r in result["results"]]
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{n} env(s) per chunk\n{next(r['obs_bytes'] for r in result['results'] if r['rows_per_chunk'] == n) / 1e6:.2f} MB of observations"
                        for n in rows])
    ax.set_ylabel("driver ms per chunk (median, p10-p90)")
    ax.set_title(f"boundary observation transfer, reference sim {layout['resolution']}px, E={layout['envs_per_process']}, "
                 f"N={layout['chunk_size']} (the worker's chunk stepping: {min(chunk):.0f}-{max(chunk):.0f} ms)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked (a bad one: one line, exit code 2); ``out_dir`` resolved and writable."""
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resolution", type=positive_int, default=224,
                        help="reference cameras' pixels per side (default: 224)")
    parser.add_argument("--envs-per-process", type=env_count, default=2,
                        help="envs of the worker, a multiple of --pipeline-stages (default: 2)")
    parser.add_argument("--pipeline-stages", type=positive_int, default=2, help="pipeline stages K (default: 2)")
    parser.add_argument("--chunk-size", type=chunk_steps, default=32, help="actions per chunk (default: 32)")
    parser.add_argument("--chunks", type=positive_int, default=20,
                        help="measured chunks per transport and chunk width (default: 20)")
    parser.add_argument("--warmup", type=nonnegative_int, default=3,
                        help="unmeasured chunks before them (default: 3)")
    add_output_arguments(parser)
    return parse_checked(parser, argv, check_args)


def check_args(args: argparse.Namespace) -> None:
    """What the options do not check one by one (ValueError); ``out_dir`` resolved and made."""
    try:
        worker_profile(args.envs_per_process, args.pipeline_stages, args.chunk_size)
    except ValueError as exc:
        raise ValueError(f"--envs-per-process {args.envs_per_process}, --pipeline-stages {args.pipeline_stages}: {exc}") from None
    check_image_memory(args, args.envs_per_process)
    args.out_dir = checked_output_dir(args)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    profiler = get_profiler()
    profiler.enabled = True
    result = run(args)
    tag = machine_tag(result["machine"])
    path = write_json(result, Path(args.out_dir) / f"transfer_{tag}.json")
    plot(result, path.with_suffix(".png"))
    for r in result["results"]:
        print(f"{r['transport']:<34} {r['rows_per_chunk']} env(s)/chunk  {r['obs_bytes'] / 1e6:5.2f} MB  "
              f"driver {r['fetch_ms_median']:6.2f} ms (p90 {r['fetch_ms_p90']:6.2f})  worker publish "
              f"{r['publish_ms_median']:5.2f} ms  chunk {r['chunk_ms_median']:6.1f} ms")
    print(f"wrote {path} and {path.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
