"""Ray Serve on a head, as KubeRay's RayService controller sees it through the dashboard: what each
application reports for the ``serveConfigV2`` it was sent, and since when.

Serve imports each application's ``import_path`` (``module:attribute`` or ``module.attribute``) and builds
it. A simulated head has no Python modules of the user's, so one rule stands for the import: a module
name that is not a dotted Python identifier (``no-such-model:app``, ``:app``) can never be imported, and
that application ends ``DEPLOY_FAILED`` with Python's ``ModuleNotFoundError`` as Serve's message, no
deployment ever created. Every other application reports ``DEPLOYING`` (deployments ``UPDATING``) for
``SERVE_DEPLOY_SECONDS``, then ``RUNNING`` (``HEALTHY``). The rule reads only what Ray itself is sent,
so the real stack's Serve stand-in (devtools/realcluster_serve.py) applies it to the same config.

    >>> deployed = ServeDeployment("applications: [{name: a, import_path: 'no-such:app'}]", datetime.now())
    >>> serve_statuses(deployed, 60.0)["a"]["status"]
    'DEPLOY_FAILED'
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import yaml

SERVE_DEPLOY_SECONDS = 10.0
"""Simulated seconds Serve takes to deploy an application (replicas start, the model loads)."""


@dataclass(frozen=True)
class ServeDeployment:
    """A Serve config submitted to one cluster: what Serve reports depends on it and on the time since."""

    config: str
    submitted_at: datetime


def _applications(serve_config: str | None) -> list[dict]:
    try:
        config = yaml.safe_load(serve_config or "") or {}
    except yaml.YAMLError:
        return []
    if not isinstance(config, dict):
        return []
    return [app for app in config.get("applications") or [] if isinstance(app, dict)]


def application_deployments(serve_config: str | None) -> dict[str, list[str]]:
    """Application name -> its deployment names, from ``serveConfigV2``."""
    return {
        app.get("name") or "default": [d["name"] for d in app.get("deployments") or [] if d.get("name")]
        for app in _applications(serve_config)
    }


def import_failure(import_path: object) -> str | None:
    """Python's error when Serve imports ``import_path``, None when the module can be imported.

    >>> import_failure("serve_model:app") is None, import_failure("models.forecast.app") is None
    (True, True)
    >>> import_failure("no-such-model:app")
    "ModuleNotFoundError: No module named 'no-such-model'"
    """
    path = import_path if isinstance(import_path, str) else ""
    module = path.split(":", 1)[0] if ":" in path else path.rpartition(".")[0]
    if module and all(part.isidentifier() for part in module.split(".")):
        return None
    return f"ModuleNotFoundError: No module named '{module}'"


def serve_statuses(deployment: ServeDeployment, elapsed: float) -> dict:
    """``applicationStatuses`` as Serve reports them ``elapsed`` simulated seconds after the submission,
    with the empty messages Go's ``omitempty`` leaves out of KubeRay's status."""
    applications = {}
    for app in _applications(deployment.config):
        name = app.get("name") or "default"
        names = [d["name"] for d in app.get("deployments") or [] if d.get("name")]
        failure = import_failure(app.get("import_path"))
        if elapsed < SERVE_DEPLOY_SECONDS:
            applications[name] = _app("DEPLOYING", {d: {"status": "UPDATING"} for d in names})
        elif failure:
            # The build task fails before any deployment exists: no deployment statuses at all.
            applications[name] = {
                "status": "DEPLOY_FAILED",
                "message": f"Deploying application {name} failed with exception:\n{failure}",
            }
        else:
            applications[name] = _app("RUNNING", {d: {"status": "HEALTHY"} for d in names})
    return applications


def _app(status: str, deployments: dict) -> dict:
    return {"status": status, "serveDeploymentStatuses": deployments} if deployments else {"status": status}
