"""The pod-lifecycle stand-in of the real-stack harness (devtools/realcluster.py): what a scheduler and a
kubelet would do for pods on a control plane without nodes.

It registers one fake Node, binds every unscheduled pod to it (the ``binding`` subresource, as the
scheduler does) and then writes the status a kubelet would write once the containers started: Running,
Ready, a pod IP. Containers never run, so pods never finish by themselves: what a RayJob's entrypoint
or a submitter Job's pod would do is not simulated here (see realcluster/README.md).

    driver = PodDriver(api_client)
    threading.Thread(target=driver.run, args=(stop_event,), daemon=True).start()
"""

from __future__ import annotations

import datetime
import itertools
import threading

from kubernetes import client, watch

NODE = "realcluster-node-1"
NODE_CAPACITY = {"cpu": "256", "memory": "1Ti", "nvidia.com/gpu": "16", "pods": "500"}


def running_status(pod: dict, pod_ip: str, now: str) -> dict:
    """The status a kubelet reports for ``pod`` once all its containers started and are ready.

    >>> running_status({"spec": {"containers": [{"name": "c", "image": "i"}]}}, "10.244.0.2", "t")["phase"]
    'Running'
    """
    containers = (pod.get("spec") or {}).get("containers") or []
    conditions = [
        {"type": kind, "status": "True", "lastTransitionTime": now}
        for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    return {
        "phase": "Running",
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "hostIP": "10.0.0.10",
        "startTime": now,
        "conditions": conditions,
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for c in containers
        ],
    }


class PodDriver:
    """Binds pods to ``NODE`` and marks them Running; ``run`` loops until ``stop`` is set."""

    def __init__(self, api_client: client.ApiClient):
        self.core = client.CoreV1Api(api_client)
        self._ips = (f"10.244.{n // 250}.{n % 250 + 2}" for n in itertools.count())

    def ensure_node(self) -> None:
        body = {
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
            "status": {"capacity": NODE_CAPACITY, "allocatable": NODE_CAPACITY},
        }
        try:
            self.core.create_node(body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        now = _now()
        ready = {"type": "Ready", "status": "True", "lastHeartbeatTime": now, "lastTransitionTime": now}
        self.core.patch_node_status(NODE, {"status": {"conditions": [ready]}})

    def handle(self, pod: dict) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") not in (None, "Pending"):
            return
        try:
            if not spec.get("nodeName"):
                self.core.create_namespaced_binding(
                    meta["namespace"],
                    {"metadata": {"name": meta["name"]}, "target": {"kind": "Node", "name": NODE}},
                    _preload_content=False,
                )
            self.core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": running_status(pod, next(self._ips), _now())}
            )
        except client.ApiException as exc:
            if exc.status not in (404, 409):  # deleted or bound meanwhile: the next event tells
                raise

    def run(self, stop: threading.Event) -> None:
        self.ensure_node()
        while not stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    self.core.list_pod_for_all_namespaces, timeout_seconds=5, _request_timeout=10
                ):
                    if stop.is_set():
                        break
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.handle(event["raw_object"])
            except client.ApiException as exc:
                if exc.status != 410:
                    raise
            finally:
                stream.stop()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
