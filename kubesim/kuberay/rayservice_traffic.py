"""Where a RayService's traffic goes: the head pod's ``ray.io/serve`` label, the head and Serve Services,
and the serve endpoints KubeRay counts.

* A RayService's cluster creates its worker pods labelled ``ray.io/serve=true`` (their readiness probe
  decides) and its head pod ``ray.io/serve=false`` (``BuildPod``). Each reconcile, before it looks at
  Serve, KubeRay asks the head's Serve proxy for its health (``GET <head-ip>:8000/-/healthz``) and sets
  the head's label to the answer (``updateHeadPodServeLabel``); a cluster without a head pod is an error
  that ends the reconcile before any status is written. The proxy answers once Serve runs on the head:
  once a Serve config was submitted to that cluster and while the head pod runs.
* Once a cluster serves every application, ``<name>-head-svc`` and ``<name>-serve-svc`` are created, or
  switched to it (``reconcileServicesToReadyCluster``); the Serve Service selects ``ray.io/cluster=<it>``
  and ``ray.io/serve=true``.
* ``numServeEndpoints`` counts the ready pods in the Serve Service's EndpointSlices
  (``calculateNumServeEndpointsFromSlices``). kubesim serves no EndpointSlices: it counts the pods the
  Service selects that are Running and Ready, as the EndpointSlice controller would list them, from the
  pods as they were before this reconcile changed a label (the controller publishes after the write,
  KubeRay reads its cache).
"""

from __future__ import annotations

import copy

from kubesim.errors import ApiError
from kubesim.kuberay.context import PODS, SERVICES, Context, owner_reference
from kubesim.kuberay.raycluster import CLUSTER_LABEL, DEFAULT_PORTS, NODE_TYPE_LABEL, SERVE_PORT, pod_running

SERVE_LABEL = "ray.io/serve"
ORIGINATED_FROM_NAME = "ray.io/originated-from-cr-name"
ORIGINATED_FROM_CRD = "ray.io/originated-from-crd"


class NoHeadPod(Exception):
    """``found 0 head``: the reconcile ends in this error, before any status is written; controller-runtime
    retries it with its exponential backoff (``Context.requeue_failed``), or at the next event."""


def serve_service_name(service_name: str) -> str:
    """``GenerateServeServiceName``: the Service clients send requests to."""
    return f"{service_name}-serve-svc"


def head_service_name(service_name: str) -> str:
    return f"{service_name}-head-svc"


def serve_endpoints(pods: list[dict], selector: dict | None) -> int:
    """Ready pods the Serve Service's ``selector`` picks (none without a Service).

    >>> pod = lambda serve: {"metadata": {"labels": {"ray.io/cluster": "c", "ray.io/serve": serve}},
    ...     "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    >>> serve_endpoints([pod("true"), pod("false")], {"ray.io/cluster": "c", "ray.io/serve": "true"})
    1
    """
    if not selector:
        return 0
    return sum(
        1
        for pod in pods
        if not pod["metadata"].get("deletionTimestamp")
        and all((pod["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
        and pod_running(pod)
    )


def update_head_serve_label(ctx: Context, service: dict, cluster: dict | None, pods: list[dict]) -> None:
    """``updateHeadPodServeLabel`` for one cluster of ``service``, whose pods are ``pods``."""
    if cluster is None:
        return
    namespace, cluster_name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
    heads = [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get(CLUSTER_LABEL) == cluster_name
        and p["metadata"]["labels"].get(NODE_TYPE_LABEL) == "head"
    ]
    if not heads and (cluster.get("spec") or {}).get("suspend"):
        # Queued by Kueue: no head by design. KubeRay v1.6.2 resumes such a cluster in place before this
        # step (reconcileRayCluster), kubesim's v1.7.0 model replaces it (shouldPrepareNewCluster, after
        # this step), so stopping here would never let it.
        return
    if not heads:
        raise NoHeadPod(f"found 0 head. cluster name {cluster_name}, namespace {namespace}")
    head = heads[0]
    healthy = pod_running(head) and (namespace, cluster_name) in ctx.serve_deployments
    exclude = bool((service.get("spec") or {}).get("excludeHeadPodFromServeSvc"))
    new = "true" if healthy and not exclude else "false"
    if (head["metadata"].get("labels") or {}).get(SERVE_LABEL) == new:
        return
    updated = copy.deepcopy(head)
    updated["metadata"].setdefault("labels", {})[SERVE_LABEL] = new
    ctx.store.update(PODS, updated)
    message = f'Updated the serve label to "{new}" for the Head Pod {namespace}/{head["metadata"]["name"]}'
    ctx.event(service, "Normal", "UpdatedHeadPodServeLabel", message)


def serve_target(ctx: Context, service: dict) -> tuple[str | None, dict | None]:
    """(the cluster the Serve Service selects, its selector); (None, None) before there is one."""
    meta = service["metadata"]
    svc = ctx.store.get_or_none(SERVICES, serve_service_name(meta["name"]), namespace=meta["namespace"])
    if svc is None:
        return None, None
    selector = (svc.get("spec") or {}).get("selector") or {}
    return selector.get(CLUSTER_LABEL), selector


def point_services(ctx: Context, service: dict, cluster_name: str) -> None:
    """``reconcileServicesToReadyCluster``: the head and Serve Services, created or switched to
    ``cluster_name`` (a Service already selecting it is left as it is)."""
    name = service["metadata"]["name"]
    head_labels = {
        ORIGINATED_FROM_NAME: name,
        ORIGINATED_FROM_CRD: "RayService",
        NODE_TYPE_LABEL: "head",
        "ray.io/identifier": f"{name}-head",
    }
    head_ports = {**DEFAULT_PORTS, "serve": SERVE_PORT}
    _point(
        ctx,
        service,
        head_service_name(name),
        head_labels,
        {CLUSTER_LABEL: cluster_name, NODE_TYPE_LABEL: "head"},
        head_ports,
    )
    serve_labels = {
        ORIGINATED_FROM_NAME: name,
        ORIGINATED_FROM_CRD: "RayService",
        SERVE_LABEL: f"{name}-serve",
    }
    selector = {CLUSTER_LABEL: cluster_name, SERVE_LABEL: "true"}
    _point(ctx, service, serve_service_name(name), serve_labels, selector, {"serve": SERVE_PORT})


def _point(
    ctx: Context, service: dict, svc_name: str, labels: dict, selector: dict, ports: dict[str, int]
) -> None:
    namespace = service["metadata"]["namespace"]
    spec = {
        "type": "ClusterIP",
        "selector": selector,
        "ports": [
            {"name": port, "port": number, "targetPort": number, "protocol": "TCP"}
            for port, number in sorted(ports.items())
        ],
    }
    try:
        current = ctx.store.get(SERVICES, svc_name, namespace=namespace)
    except ApiError as exc:
        if exc.code != 404:
            raise
        body = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": svc_name,
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [owner_reference(service)],
            },
            "spec": spec,
        }
        ctx.store.create(SERVICES, body, namespace=namespace)
        ctx.event(service, "Normal", "CreatedService", f"Created the service {namespace}/{svc_name}")
        return
    current_selector = (current.get("spec") or {}).get("selector") or {}
    if current_selector.get(CLUSTER_LABEL) == selector[CLUSTER_LABEL]:
        return
    current = copy.deepcopy(current)
    current["spec"].update(selector=selector, ports=spec["ports"])
    ctx.store.update(SERVICES, current)
    ctx.event(service, "Normal", "UpdatedService", f"Updated the service {namespace}/{svc_name}")
