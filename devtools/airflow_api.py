"""Airflow's REST API as a user or CI client calls it: sign in, trigger runs, make backfills, pause DAGs,
wait for them to be parsed, read the components' health. Reads are retried the way a polling client
would; a write whose outcome is unknown after a dropped connection or a 5xx is checked, not repeated
blindly (SQLite's "database is locked" under load surfaces as either)."""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx

USERNAME = "admin"
PASSWORD = "admin"


def _instant(value: str) -> datetime:
    """An ISO 8601 timestamp as Airflow's REST API writes or reads it ("Z" or "+00:00")."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class AirflowApi:
    """The REST client half of a running Airflow (``devtools.airflow.Airflow``): ``client`` is an
    ``httpx.Client`` on its base URL, ``log_path`` where its components log (named in errors)."""

    client: httpx.Client
    log_path: Path

    def ready(self, *, healthy: bool = False) -> bool:
        """The API answers and we are logged in; with ``healthy`` also every component reports healthy."""
        try:
            if self.client.get("/api/v2/version").status_code != 200:
                return False
            if "Authorization" not in self.client.headers:
                self.login()
        except httpx.HTTPError:
            return False
        if not healthy:
            return True
        states = self.health()
        return bool(states) and all(state == "healthy" for state in states.values())

    def login(self) -> None:
        response = self.client.post("/auth/token", json={"username": USERNAME, "password": PASSWORD})
        response.raise_for_status()
        self.client.headers["Authorization"] = f"Bearer {response.json()['access_token']}"

    def api(self, method: str, path: str, **kwargs) -> httpx.Response:
        """One REST call. A GET is safe to repeat, so a read that was dropped, timed out or answered 5xx
        (SQLite's "database is locked" surfaces as a 500 "Database error") is retried twice, the way a
        polling CI client would; writes are sent once, their outcome is the caller's to check."""
        retries = 2 if method.upper() == "GET" else 0
        for _ in range(retries):
            try:
                response = self.client.request(method, f"/api/v2{path}", **kwargs)
            except httpx.TransportError:
                pass
            else:
                if response.status_code < 500:
                    return response
            time.sleep(1)
        return self.client.request(method, f"/api/v2{path}", **kwargs)

    def trigger_dag_run(
        self, dag_id: str, conf: dict | None = None, *, run_id: str | None = None, attempts: int = 5
    ) -> str:
        """POST a DAG run as a CI client would, and return its run id.

        The run id is ours, so an attempt that failed with a 5xx (SQLite's "database is locked" in the
        api-server under load) or a dropped connection is safe to repeat: a 409 after such an attempt
        means the earlier one created the run. A 4xx on the first attempt is the caller's error.
        """
        run_id = run_id or f"manual__{uuid.uuid4().hex[:12]}"
        body = {"logical_date": None, "conf": conf or {}, "dag_run_id": run_id}
        for attempt in range(1, attempts + 1):
            try:
                response = self.api("POST", f"/dags/{dag_id}/dagRuns", json=body)
            except httpx.TransportError:
                if attempt == attempts:
                    raise
            else:
                if response.is_success or (response.status_code == 409 and attempt > 1):
                    return run_id
                if response.status_code < 500 or attempt == attempts:
                    response.raise_for_status()
            time.sleep(2 * attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def create_backfill(self, body: dict, *, timeout: float = 120) -> tuple[dict, int]:
        """``POST /api/v2/backfills`` (what the UI's backfill dialog calls), asked again until it is made.

        A failed attempt may still have made the backfill: on SQLite the api-server answers "database is
        locked" with 503 after cleaning up (best effort), but a lock met outside that cleanup (the
        request's audit-log write, a read before it) is a 500 "Database error", and Airflow commits the
        Backfill row in a session of its own before making its runs. So after a 5xx, a dropped
        connection, or a 409 "already running" that follows one, an active backfill of this DAG over the
        same dates is the one we asked for and is returned; otherwise the request is sent again.
        Returns the backfill and how many attempts failed before it.
        """
        deadline = time.monotonic() + timeout
        failures = 0
        while True:
            dropped: httpx.TransportError | None = None
            try:
                response = self.api("POST", "/backfills", json=body)
            except httpx.TransportError as exc:
                response, dropped = None, exc
            if response is not None and response.is_success:
                return response.json(), failures
            retryable = response is None or response.status_code >= 500
            if retryable or (failures and response.status_code == 409):
                made = self._active_backfill(body)
                if made is not None:
                    return made, failures
            if not retryable or time.monotonic() > deadline:
                if dropped is not None:
                    raise dropped
                response.raise_for_status()
            failures += 1
            time.sleep(min(failures, 5))

    def _active_backfill(self, body: dict) -> dict | None:
        """The uncompleted backfill of ``body``'s DAG over ``body``'s dates, if Airflow has one (and can
        say so: a failed read is "not known yet", and the caller asks again)."""
        response = self.api("GET", "/backfills", params={"dag_id": body["dag_id"]})
        if not response.is_success:
            return None
        window = (_instant(body["from_date"]), _instant(body["to_date"]))
        for backfill in response.json()["backfills"]:
            if backfill["completed_at"] is None and (
                (_instant(backfill["from_date"]), _instant(backfill["to_date"])) == window
            ):
                return backfill
        return None

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": paused}).raise_for_status()

    def wait_for_dags(self, dag_ids: list[str], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        missing = set(dag_ids)
        while missing and time.monotonic() < deadline:
            for dag_id in list(missing):
                if self.api("GET", f"/dags/{dag_id}").status_code == 200:
                    missing.discard(dag_id)
            if missing:
                time.sleep(1)
        if missing:
            raise TimeoutError(f"DAGs not parsed within {timeout}s: {sorted(missing)}; see {self.log_path}")

    def health(self) -> dict[str, str]:
        """Each component's status from ``GET /api/v2/monitor/health`` ({"scheduler": "healthy", ...});
        empty while the api-server does not answer."""
        try:
            response = self.client.get("/api/v2/monitor/health", timeout=10)
        except httpx.HTTPError:
            return {}
        if response.status_code != 200:
            return {}
        return {name: (value or {}).get("status") or "unknown" for name, value in response.json().items()}
