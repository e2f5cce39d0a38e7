"""Ray Serve on the real-stack harness's Ray heads (devtools/realcluster_dashboard.py): what KubeRay's
RayService controller asks of a head, answered as Ray Serve would for the config it was sent.

KubeRay v1.6.2 (as in a cluster: no ``--use-kubernetes-proxy``, each request with a 2 s timeout) makes three
calls per reconcile of a cluster whose head is ready:

* ``GET http://<head-svc>.<ns>.svc.cluster.local:8265/api/serve/applications/?api_type=declarative``:
  Serve's ``ServeInstanceDetails``; it reads ``applications.<name>.status`` and ``.message`` and each
  ``deployments.<name>.status``/``.message``; all ``RUNNING`` is "ready";
* ``PUT`` of the same URL with the ``serveConfigV2`` as JSON, when it has not sent this config to this
  cluster yet (or the head lists no application: a head that restarted lost them);
* ``GET http://<head pod IP>:8000/-/healthz``: the Serve proxy's health on the head; 200 labels the head
  pod ``ray.io/serve=true``, so that the ``<name>-serve-svc`` Service selects it and its EndpointSlice
  counts a serve endpoint (the RayService's ``Ready``).

What Serve does with a config is kubesim's model (``kubesim.kuberay.serve``): every application
``DEPLOYING`` (deployments ``UPDATING``) for ``SERVE_DEPLOY_SECONDS`` simulated seconds after the config
changed, then ``RUNNING`` (``HEALTHY``), or ``DEPLOY_FAILED`` with Python's ``ModuleNotFoundError`` when its
``import_path`` names a module that can never be imported. It reads only the config Ray is sent, so kubesim
and this stand-in fail the same configs.

    serve = HeadServe(clock)
    serve.deploy(config_json_text)   # PUT: Serve starts, its proxy listens on the head's port 8000
    serve.details()                  # GET: ServeInstanceDetails
"""

from __future__ import annotations

import json

from aiohttp import web

from kubesim.clock import Clock
from kubesim.kuberay.raycluster import SERVE_PORT
from kubesim.kuberay.serve import ServeDeployment, serve_statuses

SERVE_PATH = "/api/serve/applications/"
PROXY_HEALTH_PATH = "/-/healthz"


class HeadServe:
    """Serve's state on one head: nothing until a config is deployed, then that config's applications."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._config: dict | None = None
        self._deployment: ServeDeployment | None = None

    @property
    def started(self) -> bool:
        return self._deployment is not None

    def deploy(self, config: dict) -> None:
        """``PUT /api/serve/applications/``: a config equal to the running one changes nothing, another
        redeploys every application (kubesim's model does not tell applications apart)."""
        if config == self._config:
            return
        self._config = config
        self._deployment = ServeDeployment(config=json.dumps(config), submitted_at=self._clock.now())

    def details(self) -> dict:
        """``GET /api/serve/applications/``: Serve's ``ServeInstanceDetails`` (the fields KubeRay reads,
        and the frame around them).

        >>> from kubesim.clock import Clock
        >>> serve = HeadServe(Clock(1.0))
        >>> serve.details()["applications"]
        {}
        >>> serve.deploy({"applications": [{"name": "a", "import_path": "m:app", "deployments": [{"name": "D"}]}]})
        >>> app = serve.details()["applications"]["a"]
        >>> app["status"], app["deployments"]["D"]["status"]
        ('DEPLOYING', 'UPDATING')
        """
        if self._deployment is None:
            return {"controller_info": {}, "proxies": {}, "deploy_mode": "MULTI_APP", "applications": {}}
        submitted_at = self._deployment.submitted_at
        elapsed = self._clock.simulated_since(submitted_at)
        configs = {
            app.get("name") or "default": app for app in (self._config or {}).get("applications") or []
        }
        applications = {}
        for name, app in serve_statuses(self._deployment, elapsed).items():
            config = configs.get(name) or {}
            applications[name] = {
                "name": name,
                "route_prefix": config.get("route_prefix", "/"),
                "docs_path": None,
                "status": app["status"],
                "message": app.get("message", ""),
                "last_deployed_time_s": submitted_at.timestamp(),
                "deployed_app_config": config,
                "source": "declarative",
                "deployments": {
                    deployment: {"name": deployment, "status": state["status"], "message": ""}
                    for deployment, state in (app.get("serveDeploymentStatuses") or {}).items()
                },
            }
        return {
            "controller_info": {"node_id": "head", "actor_name": "SERVE_CONTROLLER_ACTOR"},
            "proxy_location": (self._config or {}).get("proxy_location", "EveryNode"),
            "http_options": {"host": "0.0.0.0", "port": SERVE_PORT},
            "proxies": {"head": {"status": "HEALTHY"}},
            "deploy_mode": "MULTI_APP",
            "applications": applications,
        }


def add_serve_routes(app: web.Application, serve: HeadServe, start_proxy) -> None:
    """Serve's REST API on a head's dashboard ``app``; ``start_proxy``: a coroutine function that opens the
    head's Serve proxy (port 8000), called when Serve starts with the first config."""

    async def get_details(request: web.Request) -> web.Response:
        return web.json_response(serve.details())

    async def put_config(request: web.Request) -> web.Response:
        try:
            config = await request.json()
        except json.JSONDecodeError:
            raise web.HTTPBadRequest(text="the request body is not JSON") from None
        if not isinstance(config, dict) or not isinstance(config.get("applications"), list):
            # Ray validates the body against ServeDeploySchema and answers 400 with pydantic's message.
            raise web.HTTPBadRequest(
                text="1 validation error for ServeDeploySchema\napplications\n  field required"
            )
        starting = not serve.started
        serve.deploy(config)
        if starting:
            await start_proxy()
        return web.Response()

    app.router.add_get(SERVE_PATH, get_details)
    app.router.add_put(SERVE_PATH, put_config)


def proxy_app() -> web.Application:
    """The Serve proxy on the head (``ray.io/serve`` label's health check): it answers ``success`` while
    it lives; requests to the applications themselves are not served (nothing of a model runs here)."""

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="success")

    app = web.Application()
    app.router.add_get(PROXY_HEALTH_PATH, healthz)
    return app
