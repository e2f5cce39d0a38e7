"""What the API server said when it said no, in the words a task log needs.

The hook (sync, worker side) and the watch hub (async, triggerer) meet the same refusals: a ``Status``
body (or plain text from a proxy, or API Priority and Fairness), a ``Retry-After`` header, and a 403 whose
fix is a grant the reader can check with ``kubectl auth can-i``. Pure: it reads attributes that both
clients' ``ApiException`` have (``status``, ``reason``, ``body``, ``headers``) and imports neither.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any


def api_error(exc: Any) -> tuple[int | None, str, str]:
    """(status, reason, message) of an ApiException, from the ``Status`` body the API server sent when there
    is one (a proxy or API Priority and Fairness may send plain text instead)."""
    status, reason, message = getattr(exc, "status", None), getattr(exc, "reason", None) or "", ""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    text = str(body).strip() if body else ""
    if text:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            reason = parsed.get("reason") or reason
            message = parsed.get("message") or ""
        else:
            message = text.splitlines()[0]
    return status, reason, message


def retry_after_seconds(exc: Any) -> float | None:
    """The ``Retry-After`` of an answer in seconds (the API server sends seconds, never an HTTP date)."""
    headers = getattr(exc, "headers", None)
    value = headers.get("Retry-After") if headers is not None and hasattr(headers, "get") else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def describe_error(exc: BaseException) -> str:
    """One line for a log: ``403 Forbidden: <the API server's message>`` for an API error (not the client's
    multi-line dump of headers and body), the type and first line of anything else."""
    if hasattr(exc, "status") and hasattr(exc, "body"):
        status, reason, message = api_error(exc)
        return f"{status} {reason}: {message}" if message else f"{status} {reason}"
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def can_i(verb: str, resource: str, namespace: str | None, identity: str | None = None) -> str:
    """The kubectl command that tells whether the connection's user (``identity``, when known) may ``verb``
    the resource (``plural.group``) in ``namespace`` (None: in every namespace).

    >>> can_i("list", "workloads.kueue.x-k8s.io", "ray", "system:serviceaccount:ray:airflow")
    'kubectl auth can-i list workloads.kueue.x-k8s.io -n ray --as=system:serviceaccount:ray:airflow'
    """
    where = f"-n {namespace}" if namespace else "--all-namespaces"
    command = f"kubectl auth can-i {verb} {resource} {where}"
    return f"{command} --as={identity}" if identity else command


def refusal_message(
    verb: str,
    resource: str,
    namespace: str | None,
    *,
    status: int,
    said: str,
    identity: str | None,
    conn_id: str,
    seconds: float | None = None,
) -> str:
    """What the API server refused (verb, resource, namespace), to whom, its words, and the command that
    shows it; with ``seconds``, the refusal that ended a wait after that long in a row.

    >>> print(refusal_message("list", "workloads.kueue.x-k8s.io", "ray", status=403, said="403 Forbidden",
    ...                       identity="system:serviceaccount:ray:airflow", conn_id="kubernetes_default",
    ...                       seconds=300))  # doctest: +NORMALIZE_WHITESPACE
    The API server refused to list workloads.kueue.x-k8s.io in namespace ray to
    system:serviceaccount:ray:airflow (connection kubernetes_default) for 300s in a row (403 Forbidden), so
    the wait cannot go on. Check: kubectl auth can-i list workloads.kueue.x-k8s.io -n ray
    --as=system:serviceaccount:ray:airflow. Fix: grant it again (include/manifests/rbac/rbac.yaml); the
    task then needs a retry. [kueue_ray] refusal_timeout sets how long a refusal is waited out.
    """
    where = f"in namespace {namespace}" if namespace else "cluster-wide"
    who = identity or "the connection's user"
    fix = (
        "grant it again (include/manifests/rbac/rbac.yaml)"
        if seconds
        else "grant it (include/manifests/rbac/rbac.yaml)"
    )
    if status == 401:
        fix = "renew the credentials (an expired or revoked token: README, docker compose against a cluster)"
    check = f"Check: {can_i(verb, resource, namespace, identity)}."
    refused = f"The API server refused to {verb} {resource} {where} to {who} (connection {conn_id})"
    if seconds is None:
        return f"{refused} ({said}). {check} Fix: {fix}."
    return (
        f"{refused} for {seconds:g}s in a row ({said}), so the wait cannot go on. {check} Fix: {fix}; the "
        "task then needs a retry. [kueue_ray] refusal_timeout sets how long a refusal is waited out."
    )


SERVED_BY = {"kueue.x-k8s.io": ("Kueue", "v0.19"), "ray.io": ("KubeRay", "v1.7")}
"""The operator that serves each API group this plugin needs, and the oldest release it works with."""


def not_served_message(group: str, version: str) -> str:
    """The one line for a cluster that does not serve ``group/version``.

    >>> not_served_message("kueue.x-k8s.io", "v1beta2")
    'Kueue API kueue.x-k8s.io/v1beta2 is not served by this cluster: install Kueue ≥ v0.19'
    """
    product, oldest = SERVED_BY.get(group, (group, ""))
    install = f"install {product} ≥ {oldest}" if oldest else f"install what serves {group}"
    return f"{product} API {group}/{version} is not served by this cluster: {install}"


def may_be_missing_api(exc: BaseException) -> bool:
    """Whether a 404 may mean that the API group/version itself is missing rather than one object: the API
    server answers an unknown group's paths with plain text (``404 page not found``), and a missing object
    with a ``Status`` naming it. Only then is discovery asked (once) to tell which."""
    if getattr(exc, "status", None) != 404:
        return False
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        return True
    if not isinstance(parsed, dict) or parsed.get("kind") != "Status":
        return True
    return not (parsed.get("details") or {}).get("name")


@contextlib.contextmanager
def reading(verb: str, resource: str, group: str, version: str) -> Iterator[None]:
    """Mark an error raised inside with the read it came from (``kueue_ray_read``: verb, ``plural.group``,
    group, version), so whoever retries, counts refusals or asks discovery names that read, not the object
    the task waits for (a Workload list refused is not "Reading RayJob failed")."""
    try:
        yield
    except Exception as exc:
        if getattr(exc, "kueue_ray_read", None) is None:
            exc.kueue_ray_read = (verb, resource, group, version)  # type: ignore[attr-defined]
        raise


def read_of(exc: BaseException) -> tuple[str, str, str, str] | None:
    """What ``reading`` marked ``exc`` with, or None."""
    return getattr(exc, "kueue_ray_read", None)


def served(custom_api: Any, group: str, version: str) -> bool:
    """Whether the cluster serves ``group/version`` (its discovery document answers), asked through a
    ``kubernetes`` ``CustomObjectsApi``."""
    try:
        custom_api.get_api_resources(group, version)
    except Exception as exc:
        if getattr(exc, "status", None) == 404:
            return False
        raise
    return True
