"""What one list+watch loop (``kueue_ray.kube.listwatch``) lists and watches, and its tunables: plain values.

Apart from the loop because its owners (the triggerer's hub, the UI's cache) build targets and settings,
and remember refusals across loops, without running a loop themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kueue_ray.kube.errors import can_i
from kueue_ray.kube.refusals import Refused

SERVER_TIMEOUT_GRACE_SECONDS = 15.0
"""How long past its ``timeoutSeconds`` a watch may stay open before the loop ends it itself, so a server
or proxy that never closes a silent stream cannot postpone the relist forever."""
LIST_REQUEST_TIMEOUT_SECONDS = 60.0
"""The client's total timeout on one page of a list (the cncf provider's ApiClient default, stated here
so that it holds with any ApiClient): a list that hangs fails and is retried with backoff."""


@dataclass
class ListWatchSettings:
    """Tunables of a loop; tests shorten them, production keeps the defaults."""

    watch_timeout_seconds: int = 600
    """Longest single watch request; a relist due earlier ends it sooner."""
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    min_healthy_stream_seconds: float = 1.0
    degraded_list_interval: float = 10.0
    """While the API server refuses to watch a resource (403) but lets it be listed: seconds between the
    loop's requests, each a list, so a change is seen at most this late (the polling triggers of the cncf
    provider wait 10 s too, but each makes its own request)."""
    degraded_watch_retry_every: int = 30
    """While polling: every this many requests is an attempt to watch again instead of a list (with the
    defaults, once every 5 minutes)."""
    trim_after_list_seconds: float | None = 5.0
    """Seconds after a list when the process gives the memory it freed back to the system
    (``kueue_ray.kube.heap``); None: never."""

    @property
    def watch_retry_seconds(self) -> float:
        return self.degraded_list_interval * self.degraded_watch_retry_every


@dataclass(frozen=True)
class Target:
    """What one loop lists and watches, through which Airflow connection (``namespace`` None: cluster-wide)."""

    conn_id: str
    group: str
    version: str
    plural: str
    namespace: str | None
    label_selector: str | None = None

    @property
    def qualified(self) -> str:
        """``plural.group``, as RBAC and ``kubectl auth can-i`` name it."""
        return f"{self.plural}.{self.group}"

    @property
    def where(self) -> str:
        return f"in namespace {self.namespace}" if self.namespace else "cluster-wide"

    def can_i(self, verb: str) -> str:
        if self.namespace:
            return can_i(verb, self.qualified, self.namespace)
        return f"kubectl auth can-i {verb} {self.qualified} --all-namespaces"

    def request(self, api: Any, **kwargs: Any) -> Any:
        """The list (or, with ``watch=True``, watch) call of a CustomObjectsApi."""
        if self.label_selector:
            kwargs["label_selector"] = self.label_selector
        if self.namespace is None:
            return api.list_cluster_custom_object(self.group, self.version, self.plural, **kwargs)
        return api.list_namespaced_custom_object(
            self.group, self.version, self.namespace, self.plural, **kwargs
        )


RefusalMemory = dict[Target, tuple[Refused, float]]
"""Target -> the last 403 to its watch and the monotonic time of it; kept by whoever starts the loops."""
