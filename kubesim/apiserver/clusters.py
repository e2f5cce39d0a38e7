"""Several clusters in one process: a MultiKueue manager and its workers, each with its own API server.

Every cluster has its own store, controllers, port and kubeconfig, as separate clusters do; the workers run
Kueue, KubeRay and the Job controller as a lone kubesim does, the manager also Kueue's MultiKueue
controllers (``kubesim.multikueue``). The manager reaches a worker through the URL a kubeconfig names
(``Cluster.reachable``), so the MultiKueueCluster objects point at the workers exactly as on real clusters:
a Secret in Kueue's namespace holding the worker's kubeconfig. Nothing of that is created here: the manager
is set up by manifests (or a test), as an administrator sets up real ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kubesim.apiserver.server import RunningServer, start_server
from kubesim.cluster import CONTROLLERS, MANAGER_CONTROLLERS, Cluster
from kubesim.resources import CRDS_DIR


def worker_names(count: int) -> list[str]:
    """The workers' names, which their MultiKueueClusters and kubeconfig files take too.

    >>> worker_names(2)
    ['worker1', 'worker2']
    """
    return [f"worker{index}" for index in range(1, count + 1)]


def worker_kubeconfig_path(manager_kubeconfig: str | Path, worker: str) -> Path:
    """Where a worker's kubeconfig goes, beside the manager's.

    >>> str(worker_kubeconfig_path("/tmp/kubesim.kubeconfig", "worker1"))
    '/tmp/kubesim.worker1.kubeconfig'
    """
    path = Path(manager_kubeconfig)
    return path.with_name(f"{path.stem}.{worker}{path.suffix}")


@dataclass
class RunningClusters:
    manager: RunningServer
    workers: dict[str, RunningServer] = field(default_factory=dict)

    async def stop(self) -> None:
        await self.manager.stop()
        for worker in self.workers.values():
            await worker.stop()


async def start_clusters(
    *,
    workers: int,
    host: str = "127.0.0.1",
    port: int = 0,
    crds_dir: str | Path | None = CRDS_DIR,
    time_scale: float = 1.0,
    kueue_config: object | None = None,
    apply: Iterable[str | Path] = (),
    worker_apply: Iterable[str | Path] = (),
    token: str | None = None,
    tls: bool = False,
    manager_controllers: Iterable[str] = MANAGER_CONTROLLERS,
) -> RunningClusters:
    """Start the workers (each on a free port, ``worker_apply`` applied to each), then the manager
    (``apply``, on ``port``), which can reach them. ``token`` is required by every one of them; with ``tls``
    each serves HTTPS with a CA of its own (its kubeconfig carries it as ``certificate-authority-data``, the
    only form MultiKueue accepts)."""
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, not {workers}")
    started: dict[str, RunningServer] = {}
    try:
        for name in worker_names(workers):
            cluster = Cluster(
                crds_dir=crds_dir, time_scale=time_scale, controllers=CONTROLLERS, kueue_config=kueue_config
            )
            started[name] = await start_server(
                cluster, host=host, port=0, apply=worker_apply, token=token, tls=tls
            )
        manager = Cluster(
            crds_dir=crds_dir,
            time_scale=time_scale,
            controllers=manager_controllers,
            kueue_config=kueue_config,
        )
        manager.reachable = {server.url: server.cluster for server in started.values()}
        running = await start_server(manager, host=host, port=port, apply=apply, token=token, tls=tls)
    except BaseException:
        for server in started.values():
            await server.stop()
        raise
    return RunningClusters(running, started)
