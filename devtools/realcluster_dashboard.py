"""The Ray heads' dashboards of the real-stack harness: the Ray Jobs REST API KubeRay calls, answered on
each running head pod's IP, port 8265, inside the harness's network namespace (devtools/realcluster_netns.py).

KubeRay reaches it as an operator in the cluster reaches a real head (its default, without
``--use-kubernetes-proxy``): at ``http://<cluster>-head-svc.<ns>.svc.cluster.local:8265`` with a 2 s
timeout, the name resolved through the hosts file the harness gives KubeRay's mount namespace
(``hosts``): one line per running head, to the head pod's IP, as the cluster's DNS and Service would take
it there. What a job does once submitted is kubesim's
simulation of a Ray driver (``kubesim.kuberay.dashboard``: the entrypoint's sleeps, epochs and exit code,
the runtime environment's package installation); only what Ray itself sees of a job is used, the
submission request, never the RayJob's annotations.

    dashboards = HeadDashboards(netns, time_scale=20, hosts=Path("work/hosts"))
    dashboards.open("team-a", "rayjob-abc-raycluster-x", "10.244.0.7")   # head pod starting
    dashboards.close("team-a", "rayjob-abc-raycluster-x", "10.244.0.7")  # that head pod gone: its jobs die
    dashboards.submitter("team-a", "rayjob-abc-raycluster-x", submission) # a K8sJobMode submitter's run: exit code
"""

from __future__ import annotations

import itertools
import json
import ssl
from pathlib import Path

import yaml
from aiohttp import web

from devtools.realcluster_serve import HeadServe, add_serve_routes, proxy_app
from kubesim.clock import Clock
from kubesim.kuberay.dashboard import Behaviour, RayDashboards, RayJobRun
from kubesim.kuberay.raycluster import SERVE_PORT, head_service_name
from kubesim.kuberay.submitter import submission_lines

DASHBOARD_PORT = 8265
KUBELET_PORT = 10250
RAY_VERSION = "2.46.0"


def job_details(run: RayJobRun, submission: dict) -> dict:
    """``GET /api/jobs/<id>``'s body (Ray's ``JobDetails``) for ``run`` as submitted with ``submission``.

    >>> from kubesim.kuberay.dashboard import Behaviour
    >>> job_details(RayJobRun("j1", "sleep 1", Behaviour()), {"metadata": {"a": "b"}})["status"]
    'PENDING'
    """

    def millis(moment) -> int | None:
        return int(moment.timestamp() * 1000) if moment else None

    return {
        "type": "SUBMISSION",
        "job_id": run.job_id,
        "submission_id": run.job_id,
        "driver_info": None,
        "status": run.status,
        "entrypoint": run.entrypoint,
        "message": run.message,
        "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR" if run.status == "FAILED" else None,
        "start_time": millis(run.start_time),
        "end_time": millis(run.end_time),
        "metadata": submission.get("metadata") or {},
        "runtime_env": submission.get("runtime_env") or {},
    }


def behaviour(submission: dict) -> Behaviour:
    """How the simulated driver runs a submission: from its entrypoint and runtime environment only."""
    runtime_env = submission.get("runtime_env") or {}
    spec = {
        "entrypoint": submission.get("entrypoint") or "",
        "runtimeEnvYAML": yaml.safe_dump(runtime_env) if runtime_env else "",
    }
    return Behaviour.for_attempt({"spec": spec}, 0)


class HeadDashboards:
    """One dashboard server per running head, bound to the head pod's IP; one simulated job table each."""

    def __init__(self, netns, time_scale: float = 1.0, hosts: Path | None = None) -> None:
        self._netns = netns
        self._hosts = hosts
        self._hosts_base = hosts.read_text() if hosts is not None else ""
        self._jobs_clock = Clock(time_scale)
        self._jobs = RayDashboards(self._jobs_clock, lambda namespace, cluster: None)
        self._submissions: dict[tuple[str, str, str], dict] = {}
        self._runners: dict[tuple[str, str], web.AppRunner] = {}
        self._head_ips: dict[tuple[str, str], str] = {}  # the head pod whose dashboard a runner is
        self._proxies: dict[tuple[str, str], web.AppRunner] = {}  # Serve's proxy, port 8000, once started
        self._ids = itertools.count(1)
        self._pod_logs: dict[tuple[str, str, str], list[str]] = {}

    def open(self, namespace: str, cluster: str, ip: str) -> None:
        self._netns.call(self._open(namespace, cluster, ip))

    def close(self, namespace: str, cluster: str, ip: str) -> None:
        """The head pod at ``ip`` is gone. Only its own dashboard goes: a head KubeRay created again for the
        same cluster (a new pod, a new IP) may have opened before the old pod's deletion is seen."""
        self._netns.call(self._close(namespace, cluster, ip))

    def close_all(self) -> None:
        for namespace, cluster in list(self._runners):
            self._netns.call(self._close(namespace, cluster))

    @property
    def time_scale(self) -> float:
        return self._jobs_clock.time_scale

    def write_log(self, namespace: str, pod: str, container: str, lines: list[str]) -> None:
        """What a container printed, for ``serve_logs``."""
        self._netns.loop().call_soon_threadsafe(
            self._pod_logs.__setitem__, (namespace, pod, container), lines
        )

    def serve_logs(self, ip: str, certfile: str, keyfile: str) -> None:
        """The node's kubelet as far as logs go: ``GET /containerLogs/<ns>/<pod>/<container>`` (what the API
        server asks for ``pods/log``, over TLS it does not verify without a kubelet CA) answers what the
        submitters printed; other containers printed nothing."""
        self._netns.call(self._serve_logs(ip, certfile, keyfile))

    async def _serve_logs(self, ip: str, certfile: str, keyfile: str) -> None:
        async def container_logs(request: web.Request) -> web.Response:
            info = request.match_info
            lines = self._pod_logs.get((info["namespace"], info["pod"], info["container"]), [])
            tail = request.query.get("tailLines")
            if tail and tail.isdigit():
                lines = lines[-int(tail) :] if int(tail) else []
            return web.Response(text="".join(f"{line}\n" for line in lines))

        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certfile, keyfile)
        await web.TCPSite(runner, ip, KUBELET_PORT, ssl_context=context).start()
        self._runners[("", "kubelet")] = runner

    def submitter(
        self, namespace: str, cluster: str, submission: dict, log_to: tuple[str, str] = ("", "")
    ) -> int:
        """What KubeRay's K8sJobMode submitter container does (``ray job status || ray job submit --no-wait``,
        then ``ray job logs --follow``) against the head of ``cluster``: its exit code, 0 once the job ended
        (whatever its verdict: KubeRay reads that from the dashboard), 1 when there is no head to talk to or
        it dies under the job. Blocks until then. ``log_to``: (pod, container) whose log gets what the CLI
        prints."""
        return self._netns.call(self._submitter(namespace, cluster, submission, log_to), timeout=None)

    async def _submitter(
        self, namespace: str, cluster: str, submission: dict, log_to: tuple[str, str]
    ) -> int:
        log = self._pod_logs.setdefault((namespace, *log_to), [])
        address = f"{cluster}-head-svc.{namespace}.svc.cluster.local:{DASHBOARD_PORT}"
        if (namespace, cluster) not in self._runners:
            log.append(f"ConnectionError: could not reach the Ray dashboard at http://{address}")
            return 1
        job_id = submission["submission_id"]
        run = self._jobs.get_job(namespace, cluster, job_id)
        if run is None:
            log.extend(submission_lines(address, job_id))
            self._submissions[(namespace, cluster, job_id)] = submission
            run = self._jobs.submit(
                namespace, cluster, job_id, submission["entrypoint"], behaviour(submission)
            )
        async for line in run.follow():
            log.append(line)
        if run.gone:
            log.append(f"ConnectionError: lost the connection to the Ray dashboard at http://{address}")
            return 1
        return 0

    async def _open(self, namespace: str, cluster: str, ip: str) -> None:
        await self._close(namespace, cluster)  # a new head is a new Ray cluster: the old one's jobs are gone
        self._head_ips[(namespace, cluster)] = ip
        self._write_hosts()
        app = self._app(namespace, cluster)

        async def start_proxy() -> None:
            proxy = web.AppRunner(proxy_app(), access_log=None)
            await proxy.setup()
            await web.TCPSite(proxy, ip, SERVE_PORT).start()
            self._proxies[(namespace, cluster)] = proxy

        add_serve_routes(app, HeadServe(self._jobs_clock), start_proxy)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, ip, DASHBOARD_PORT).start()
        self._runners[(namespace, cluster)] = runner

    async def _close(self, namespace: str, cluster: str, ip: str | None = None) -> None:
        if ip is not None and self._head_ips.get((namespace, cluster)) != ip:
            return
        if self._head_ips.pop((namespace, cluster), None) is not None:
            self._write_hosts()
        runner = self._runners.pop((namespace, cluster), None)
        proxy = self._proxies.pop((namespace, cluster), None)
        self._jobs.drop_cluster(namespace, cluster)
        for server in (runner, proxy):
            if server is not None:
                await server.cleanup()

    def _write_hosts(self) -> None:
        """The hosts file with a line per running head: ``<pod IP> <cluster>-head-svc.<ns>.svc.cluster.local``
        (KubeRay's ``FetchHeadServiceURL`` name), rewritten in place (it is bind-mounted over KubeRay's
        /etc/hosts, which glibc reads at every lookup)."""
        if self._hosts is None:
            return
        lines = [f"{ip} {head_service_name(cluster)}.{namespace}.svc.cluster.local"
                 for (namespace, cluster), ip in sorted(self._head_ips.items())]  # fmt: skip
        self._hosts.write_text(self._hosts_base + "".join(f"{line}\n" for line in lines))

    def _app(self, namespace: str, cluster: str) -> web.Application:
        jobs, submissions = self._jobs, self._submissions

        def found(request: web.Request) -> RayJobRun:
            run = jobs.get_job(namespace, cluster, request.match_info["job_id"])
            if run is None:
                raise web.HTTPNotFound(text=f"Job {request.match_info['job_id']} does not exist")
            return run

        def details(run: RayJobRun) -> dict:
            return job_details(run, submissions.get((namespace, cluster, run.job_id), {}))

        async def version(request: web.Request) -> web.Response:
            return web.json_response({"version": "4", "ray_version": RAY_VERSION, "ray_commit": ""})

        async def list_jobs(request: web.Request) -> web.Response:
            return web.json_response([details(run) for run in jobs.list_jobs(namespace, cluster)])

        async def submit(request: web.Request) -> web.Response:
            try:
                body = await request.json()
            except json.JSONDecodeError:
                raise web.HTTPBadRequest(text="the request body is not JSON") from None
            job_id = body.get("submission_id") or f"raysubmit_{next(self._ids):016d}"
            if jobs.get_job(namespace, cluster, job_id) is not None:
                raise web.HTTPInternalServerError(
                    text=f"Job with submission_id {job_id} already exists. Please use a different submission_id."
                )
            submissions[(namespace, cluster, job_id)] = body
            jobs.submit(namespace, cluster, job_id, body.get("entrypoint") or "", behaviour(body))
            return web.json_response({"job_id": job_id, "submission_id": job_id})

        async def get_job(request: web.Request) -> web.Response:
            return web.json_response(details(found(request)))

        async def stop(request: web.Request) -> web.Response:
            run = found(request)
            running = not run.finished
            jobs.stop_job(namespace, cluster, run.job_id)
            return web.json_response({"stopped": running})

        async def delete(request: web.Request) -> web.Response:
            run = found(request)
            if not jobs.delete_job(namespace, cluster, run.job_id):
                raise web.HTTPBadRequest(
                    text=f"Attempted to delete job with id '{run.job_id}', but it is in a non-terminal state "
                    f"{run.status}."
                )
            submissions.pop((namespace, cluster, run.job_id), None)
            return web.json_response({"deleted": True})

        async def logs(request: web.Request) -> web.Response:
            return web.json_response({"logs": "".join(f"{line}\n" for line in found(request).lines)})

        app = web.Application()
        app.router.add_get("/api/version", version)
        app.router.add_get("/api/jobs/", list_jobs)
        app.router.add_post("/api/jobs/", submit)
        app.router.add_get("/api/jobs/{job_id}", get_job)
        app.router.add_post("/api/jobs/{job_id}/stop", stop)
        app.router.add_delete("/api/jobs/{job_id}", delete)
        app.router.add_get("/api/jobs/{job_id}/logs", logs)
        return app
