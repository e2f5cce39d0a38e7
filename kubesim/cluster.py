"""The simulated cluster: clock, registry, store, pod logs and the controllers that act on them.

This is the seam for controllers. Each controller module exposes ``make_controller(cluster)``, which builds its
controller: an object with ``install()`` (admission hooks, aggregated APIs: things that must exist before
the first request) and ``async run()`` (its reconcile loop, cancelled on stop). ``start`` builds each one
once and hands the same object both calls, so a controller's state is its own, not the cluster's.
The HTTP layer only ever sees a Cluster; the cluster imports nothing from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubesim import pod_strategy
from kubesim.clock import Clock
from kubesim.errors import ApiError
from kubesim.job_strategy import admission_hook as job_strategy
from kubesim.kubelet import ContainerProgram
from kubesim.podlogs import PodLogs
from kubesim.resources import CRDS_DIR, Registry, ResourceType
from kubesim.store import Store

log = logging.getLogger(__name__)

CONTROLLERS = ("kubesim.batch", "kubesim.kuberay", "kubesim.kueue")
MANAGER_CONTROLLERS = (*CONTROLLERS, "kubesim.multikueue")
"""A MultiKueue manager's: Kueue with its MultiKueue controllers (``kubesim.apiserver.clusters``)."""
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class AggregatedApi:
    """An API served by a handler rather than the store (e.g. Kueue's visibility API).
    The cluster keeps them; the HTTP layer serves them and lists them in discovery."""

    group: str
    version: str
    resources: list[dict]
    handler: Callable[[str, dict], dict]


class Cluster:
    """One simulated cluster. ``controllers`` names the controller modules to run; tests of the bare
    API server pass ``()`` so nothing but the test touches their objects. ``kueue_config`` is the
    Kueue manager configuration (``kubesim.kueue.config.KueueConfig``; None: Kueue's defaults)."""

    def __init__(
        self,
        *,
        crds_dir: str | Path | None = CRDS_DIR,
        time_scale: float = 1.0,
        controllers: Iterable[str] = CONTROLLERS,
        kueue_config: object | None = None,
    ) -> None:
        self.clock = Clock(time_scale)
        self.kueue_config = kueue_config
        self.registry = Registry(crds_dir)
        self.store = Store(self.registry, self.clock)
        # The API server's own strategy for batch/v1 Jobs (defaulting, selector, validation): built in, so
        # it runs before any controller's admission hook and even without controllers.
        self.store.add_admission_hook(job_strategy)
        self.store.add_admission_hook(pod_strategy.admission_hook)
        self.logs = PodLogs()
        # Programs the kubelet can run in a container besides what its command line says by itself
        # (``kubesim.batch.container``; ``kubesim.kubelet.ContainerProgram``). Controller modules add the programs of the images they simulate
        # (KubeRay: the ray CLI its submitter runs).
        self.container_programs: list[ContainerProgram] = []
        self.aggregated_apis: dict[tuple[str, str], AggregatedApi] = {}
        self.controllers = tuple(controllers)
        self.reachable: dict[str, Cluster] = {}
        """The API servers this cluster's controllers can reach, by the URL a kubeconfig names: the other
        clusters of the same process (a MultiKueue manager's workers). Empty for a lone cluster."""
        self.authenticates: Callable[[str | None], bool] = lambda token: True
        """Whether this cluster's API server accepts a bearer token (its HTTP layer sets the rule; another
        cluster of the process asks it before it connects)."""
        self._tasks: list[asyncio.Task] = []

    def register_api(self, group: str, version: str, resources: list[dict], handler: Callable) -> None:
        """Serve ``/apis/<group>/<version>/...`` from ``handler(path, query) -> dict`` (aggregated API)."""
        self.aggregated_apis[(group, version)] = AggregatedApi(group, version, list(resources), handler)

    async def start(self) -> None:
        """Build every controller, install them all (hooks first, so no object escapes them), then run
        each as a task."""
        controllers = [importlib.import_module(name).make_controller(self) for name in self.controllers]
        for controller in controllers:
            controller.install()
        for name, controller in zip(self.controllers, controllers, strict=True):
            task = asyncio.create_task(controller.run(), name=f"controller:{name}")
            task.add_done_callback(_report_crash)
            self._tasks.append(task)

    def object_counts(self) -> dict[str, int]:
        """Stored objects per kind, for /kubesim/stats."""
        counts = {}
        for key, count in self.store.counts().items():
            rt = self.registry.get(key)
            counts[rt.kind if rt else key] = count
        return counts

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):  # a crash was logged already
                await task
        self._tasks.clear()

    def apply(self, path: str | Path) -> list[dict]:
        """Create or replace every object in a YAML/JSON file or in a directory's files (sorted, multi-doc).

        Like ``kubectl apply -f DIR`` without ``-R``, subdirectories are not read: our manifests keep
        alternative setups (single-queue/, team-queues/) in subfolders that must be chosen explicitly.

        Namespaces go first, then cluster-scoped kinds, then namespaced ones, so a directory need not be
        ordered by dependency. CustomResourceDefinitions are skipped: the kinds are served already, and
        their schemas come from the vendored CRDs (or ``--crds``).
        """
        documents = [doc for doc in _documents(Path(path)) if doc.get("kind") != "CustomResourceDefinition"]
        resolved = [(self._resource_type(doc, path), doc) for doc in documents]
        resolved.sort(key=lambda pair: _apply_rank(pair[0]))
        return [self._create_or_replace(rt, doc) for rt, doc in resolved]

    def _resource_type(self, doc: dict, source: str | Path) -> ResourceType:
        rt = self.registry.by_kind(doc.get("apiVersion", ""), doc.get("kind", ""))
        if rt is None:
            raise ValueError(f"{source}: kubesim serves no {doc.get('kind')!r} in {doc.get('apiVersion')!r}")
        return rt

    def _create_or_replace(self, rt: ResourceType, doc: dict) -> dict:
        metadata = doc.setdefault("metadata", {})
        if rt.namespaced:
            metadata.setdefault("namespace", "default")
        namespace = metadata.get("namespace") if rt.namespaced else None
        try:
            return self.store.create(rt.key, doc, namespace=namespace)
        except ApiError as error:
            if error.code != 409:
                raise
        current = self.store.get(rt.key, metadata["name"], namespace=namespace)
        metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self.store.update(rt.key, doc)


def _apply_rank(rt: ResourceType) -> int:
    if rt.key == "namespaces":
        return 0
    return 2 if rt.namespaced else 1


def _documents(path: Path) -> Iterator[dict]:
    if not path.exists():
        raise FileNotFoundError(f"--apply: {path} does not exist")
    files = sorted(p for p in path.glob("*") if p.suffix in MANIFEST_SUFFIXES) if path.is_dir() else [path]
    for file in files:
        with file.open() as fh:
            for doc in yaml.safe_load_all(fh):
                if not doc:
                    continue
                if doc.get("kind", "").endswith("List") and isinstance(doc.get("items"), list):
                    yield from (item for item in doc["items"] if item)
                else:
                    yield doc


def _report_crash(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s crashed", task.get_name(), exc_info=task.exception())
