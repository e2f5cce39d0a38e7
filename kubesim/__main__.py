"""`python -m kubesim serve`: the simulated cluster as a standalone process."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys

from kubesim.apiserver.server import start_server, write_kubeconfig
from kubesim.cluster import Cluster
from kubesim.errors import ApiError
from kubesim.resources import CRDS_DIR


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kubesim", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the Kubernetes API with KubeRay and Kueue behind it")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on start)")
    serve.add_argument("--kubeconfig-out", metavar="FILE", help="write a kubeconfig for this server")
    serve.add_argument(
        "--crds",
        metavar="DIR",
        default=str(CRDS_DIR),
        help="CRD YAMLs: schemas and printer columns (default: the vendored Kueue and KubeRay CRDs)",
    )
    serve.add_argument(
        "--apply",
        metavar="PATH",
        action="append",
        default=[],
        help="file or dir created at start (repeatable)",
    )
    serve.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per real second")
    serve.add_argument(
        "--kueue-config",
        metavar="FILE",
        help="Kueue's manager Configuration YAML; its waitForPodsReady (timeout, requeuingStrategy) is "
        "honoured in simulated time (default: Kueue v0.19's, 30 min timeout, 60 s backoff doubling to 1 h)",
    )
    serve.add_argument(
        "--token",
        metavar="TOKEN",
        help="require 'Authorization: Bearer TOKEN' on every API request (401 otherwise); the kubeconfig "
        "written by --kubeconfig-out carries it",
    )
    serve.add_argument(
        "--tls",
        action="store_true",
        help="serve HTTPS with a certificate from a CA made for this start, as a real API server does; the "
        "kubeconfig carries the CA (kubectl sends a bearer token only over HTTPS)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="also serve N worker clusters (worker1..N, each on a free port with its own store and "
        "controllers) and run Kueue's MultiKueue on this one, their manager; each worker's kubeconfig is "
        "written beside --kubeconfig-out's (kubesim.worker1.kubeconfig, ...). Default 0: one lone cluster",
    )
    serve.add_argument(
        "--worker-apply",
        metavar="PATH",
        action="append",
        default=[],
        help="with --workers: file or dir created at start on every worker (repeatable)",
    )
    return parser


def tune_gc() -> None:
    """Keep full garbage collections from stalling the event loop.

    kubesim holds every object as nested dicts, so with thousands of RayJobs a full (generation 2)
    collection walks hundreds of thousands of containers and pauses every watch stream for 100-200 ms.
    Stored objects are acyclic JSON, freed by reference counting; only the rare cyclic garbage of the HTTP
    stack needs the collector. So the start-up state (CRD schemas, applied manifests) is frozen out of
    collection and the older generations are collected far less often.
    """
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


async def serve(args: argparse.Namespace) -> None:
    from kubesim.kueue.config import KueueConfig

    kueue_config = KueueConfig.load(args.kueue_config) if args.kueue_config else None
    if args.workers:
        await serve_clusters(args, kueue_config)
        return
    cluster = Cluster(crds_dir=args.crds, time_scale=args.time_scale, kueue_config=kueue_config)
    server = await start_server(
        cluster, host=args.host, port=args.port, apply=args.apply, token=args.token, tls=args.tls
    )
    tune_gc()
    stop = stop_on_signals()
    try:
        if args.kubeconfig_out:
            write_kubeconfig(args.kubeconfig_out, server.url, args.token, server.ca_pem)
        print(f"kubesim listening on {server.url}", flush=True)
        await stop.wait()
    finally:
        await server.stop()


def stop_on_signals() -> asyncio.Event:
    """An event SIGINT and SIGTERM set: serve until it is, then stop cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return stop


async def serve_clusters(args: argparse.Namespace, kueue_config) -> None:
    """``--workers N``: a MultiKueue manager and N workers (``kubesim.apiserver.clusters``)."""
    from kubesim.apiserver.clusters import start_clusters, worker_kubeconfig_path

    running = await start_clusters(
        workers=args.workers,
        host=args.host,
        port=args.port,
        crds_dir=args.crds,
        time_scale=args.time_scale,
        kueue_config=kueue_config,
        apply=args.apply,
        worker_apply=args.worker_apply,
        token=args.token,
        tls=args.tls,
    )
    tune_gc()
    stop = stop_on_signals()
    try:
        if args.kubeconfig_out:
            write_kubeconfig(args.kubeconfig_out, running.manager.url, args.token, running.manager.ca_pem)
            for name, worker in running.workers.items():
                path = worker_kubeconfig_path(args.kubeconfig_out, name)
                write_kubeconfig(path, worker.url, args.token, worker.ca_pem)
        print(f"kubesim listening on {running.manager.url}", flush=True)
        for name, worker in running.workers.items():
            print(f"kubesim worker {name} listening on {worker.url}", flush=True)
        await stop.wait()
    finally:
        await running.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(args))
    except (FileNotFoundError, ValueError, ApiError) as exc:  # bad options or manifests
        print(f"kubesim: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
