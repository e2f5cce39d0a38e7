"""What the e2e tests do to Airflow and see of the cluster, in a user's terms.

Airflow is driven only through its REST API and CLI (the `E2E` methods). The cluster is read with the
official `kubernetes` client, and only with all-namespaces lists: the operator and triggerer never make
such calls (they are namespaced), so the RBAC test can tell the tests' own reads from the project's calls
in kubesim's request log.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from kueue_ray.naming import MANAGED_BY_SELECTOR, AirflowIdentity

from devtools.airflow import Airflow

TERMINAL_RUN_STATES = {"success", "failed"}
TERMINAL_TI_STATES = {"success", "failed", "skipped", "upstream_failed", "removed"}
RAY = ("ray.io", "v1")
KUEUE = ("kueue.x-k8s.io", "v1beta2")


def wait_until(
    condition: Callable[[], Any], *, timeout: float, interval: float = 0.5, what: str | Callable[[], str] = ""
) -> Any:
    """Poll until `condition()` is truthy and return it; TimeoutError naming `what` (a callable is asked
    at the timeout, so it can describe the state then) otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g}s: {what() if callable(what) else what}")
        time.sleep(interval)


def log_text(payload: dict) -> str:
    """A task log as the UI shows it, from the structured entries of GET .../logs/{try}."""
    lines = []
    for entry in payload.get("content") or ():
        if isinstance(entry, str):
            lines.append(entry)
            continue
        extra = {k: v for k, v in entry.items() if k not in ("event", "timestamp", "level", "logger")}
        line = f"{entry.get('timestamp', '')} {entry.get('level', '')} {entry.get('event', '')}"
        if extra:
            line += f" {extra}"
        lines.append(line)
    return "\n".join(lines)


@dataclass
class E2E:
    """The shared Airflow + kubesim of the session, and the user-level actions the tests take."""

    airflow: Airflow
    kubesim_url: str
    custom: Any  # kubernetes.client.CustomObjectsApi
    kubesim_verify: Any = True
    """What raw HTTP to kubesim needs to trust it (``KubesimProcess.verify``: its CA when it serves HTTPS)."""
    requests: list[dict] = field(default_factory=list)
    """kubesim's request log, accumulated over the whole session (see conftest.collect_requests)."""
    unpaused: set[str] = field(default_factory=set)
    """DAGs a test unpaused that were paused: paused again when its module ends (``pause_again``)."""

    # ----- Airflow: runs --------------------------------------------------------------------------

    def trigger(self, dag_id: str, conf: dict | None = None, *, run_id: str | None = None) -> httpx.Response:
        body = {
            "logical_date": None,
            "conf": conf or {},
            "dag_run_id": run_id or f"e2e__{uuid.uuid4().hex[:10]}",
        }
        return self.airflow.api("POST", f"/dags/{dag_id}/dagRuns", json=body)

    def start_run(self, dag_id: str, conf: dict | None = None, *, run_id: str | None = None) -> str:
        """Trigger a run as a CI client would (5xx retried with the same run id; Airflow.trigger_dag_run)."""
        return self.airflow.trigger_dag_run(dag_id, conf, run_id=run_id or f"e2e__{uuid.uuid4().hex[:10]}")

    def run(self, dag_id: str, run_id: str) -> dict:
        response = self.airflow.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
        response.raise_for_status()
        return response.json()

    def runs(self, dag_id: str, **query) -> list[dict]:
        response = self.airflow.api("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100, **query})
        response.raise_for_status()
        return response.json()["dag_runs"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 180) -> dict:
        return wait_until(
            lambda: (run := self.run(dag_id, run_id))["state"] in TERMINAL_RUN_STATES and run,
            timeout=timeout,
            interval=1,
            what=lambda: f"{dag_id} run {run_id} finished; tasks: {self.ti_states(dag_id, run_id)}",
        )

    def unpause(self, dag_id: str) -> None:
        response = self.airflow.api("GET", f"/dags/{dag_id}")
        response.raise_for_status()
        if response.json()["is_paused"]:
            self.unpaused.add(dag_id)
            self.airflow.set_paused(dag_id, False)

    def pause_again(self) -> None:
        """Pause what ``unpause`` unpaused. A scheduled pipeline left on would start a run of its own at its
        next interval (the daily one at midnight UTC) in the middle of a later test, whose RayJob that
        test would count as its own."""
        for dag_id in sorted(self.unpaused):
            self.airflow.set_paused(dag_id, True)
        self.unpaused.clear()

    # ----- Airflow: task instances ----------------------------------------------------------------

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        response = self.airflow.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        response.raise_for_status()
        return response.json()["task_instances"]

    def ti(self, dag_id: str, run_id: str, task_id: str) -> dict:
        response = self.airflow.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
        response.raise_for_status()
        return response.json()

    def ti_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        try:
            return {ti["task_id"]: ti["state"] for ti in self.task_instances(dag_id, run_id)}
        except httpx.HTTPError as exc:
            return {"<unavailable>": repr(exc)}

    def wait_ti_state(self, dag_id: str, run_id: str, task_id: str, states: set[str], timeout=120) -> dict:
        return wait_until(
            lambda: (ti := self.ti(dag_id, run_id, task_id))["state"] in states and ti,
            timeout=timeout,
            what=f"{dag_id}/{run_id}/{task_id} in {sorted(states)}",
        )

    def mark_failed(self, dag_id: str, run_id: str, task_id: str) -> None:
        response = self.airflow.api(
            "PATCH",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}",
            json={"new_state": "failed"},
        )
        assert response.status_code == 200, response.text

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int | None = None) -> str:
        """The whole log of one try (default: the latest), including what the trigger wrote."""
        if try_number is None:
            try_number = self.ti(dag_id, run_id, task_id)["try_number"]
        response = self.airflow.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"full_content": "true"},
            headers={"Accept": "application/json"},
        )
        response.raise_for_status()
        return log_text(response.json())

    def every_try_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        """The logs of every try of one task, in order: what a user reads across the UI's try tabs."""
        tries = self.ti(dag_id, run_id, task_id)["try_number"] or 0
        return "\n".join(self.task_log(dag_id, run_id, task_id, number) for number in range(1, tries + 1))

    def all_logs(self, dag_id: str, run_id: str) -> str:
        return "\n".join(
            self.task_log(dag_id, run_id, ti["task_id"], number)
            for ti in self.task_instances(dag_id, run_id)
            for number in range(1, (ti["try_number"] or 0) + 1)
        )

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        response = self.airflow.api(
            "GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        )
        response.raise_for_status()
        return response.json()["value"]

    # ----- the cluster ----------------------------------------------------------------------------

    def rayjobs(self) -> list[dict]:
        """Every RayJob our operator created that still exists (all namespaces)."""
        return self.custom.list_cluster_custom_object(*RAY, "rayjobs", label_selector=MANAGED_BY_SELECTOR)[
            "items"
        ]

    def rayjobs_of(self, dag_id: str, run_id: str, task_id: str) -> list[dict]:
        return [job for job in self.rayjobs() if owner(job) == (dag_id, run_id, task_id)]

    def rayservices(self) -> list[dict]:
        """Every RayService our DAGs deployed that still exists (all namespaces)."""
        return self.custom.list_cluster_custom_object(
            *RAY, "rayservices", label_selector=MANAGED_BY_SELECTOR
        )["items"]

    def workloads(self) -> list[dict]:
        return self.custom.list_cluster_custom_object(*KUEUE, "workloads")["items"]

    def faults(self, **settings) -> None:
        httpx.post(
            f"{self.kubesim_url}/kubesim/faults", json=settings, timeout=10, verify=self.kubesim_verify
        ).raise_for_status()

    def clear_faults(self) -> None:
        httpx.delete(
            f"{self.kubesim_url}/kubesim/faults", timeout=10, verify=self.kubesim_verify
        ).raise_for_status()

    def collect_requests(self) -> list[dict]:
        """Move kubesim's request log into `self.requests` (the log is bounded; the session is not)."""
        fresh = httpx.get(
            f"{self.kubesim_url}/kubesim/requests", timeout=30, verify=self.kubesim_verify
        ).json()
        httpx.delete(
            f"{self.kubesim_url}/kubesim/requests", timeout=10, verify=self.kubesim_verify
        ).raise_for_status()
        self.requests.extend(fresh)
        return fresh


def credential_leaks(airflow: Airflow, kubeconfig: Path) -> tuple[int, dict[str, list[str]]]:
    """How many task logs this Airflow wrote, and which of them hold a credential (the kubeconfig's tokens,
    the REST API's token), each leak shown by its first characters only."""
    users = yaml.safe_load(kubeconfig.read_text())["users"]
    secrets = {user["user"]["token"] for user in users if user["user"].get("token")}
    secrets.add(airflow.client.headers["Authorization"].removeprefix("Bearer "))
    logs = [p for p in (airflow.home / "logs").rglob("*.log*") if "dag_id=" in str(p)]
    leaks = {str(p): [s[:6] + "..." for s in secrets if s in p.read_text(errors="replace")] for p in logs}
    return len(logs), {path: found for path, found in leaks.items() if found}


def rayjob_creations(records: Iterable[dict], names: Iterable[str] | None = None) -> int:
    """How many RayJobs were created (POST answered 201) in these request-log records; with `names`, only
    those of these names (kubesim logs the name a create made)."""
    wanted = None if names is None else set(names)
    return sum(
        1
        for record in records
        if record["resource"] == "rayjobs"
        and record["verb"] == "create"
        and record["code"] == 201
        and (wanted is None or record["name"] in wanted)
    )


def owner(rayjob: dict) -> tuple[str, str, str] | None:
    """(dag_id, run_id, task_id) from the identity annotations the operator writes."""
    identity = AirflowIdentity.from_annotations(rayjob["metadata"].get("annotations"))
    return (identity.dag_id, identity.run_id, identity.task_id) if identity else None
