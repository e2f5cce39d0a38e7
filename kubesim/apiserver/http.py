"""What every handler of the HTTP layer shares: the application's state keys and the JSON responses.

Apart from ``app`` (routing and middleware) and ``rest`` (the Kubernetes API) so that both can use them
without importing each other.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from kubesim.apiserver.faults import Auth, Faults, Stats
from kubesim.apiserver.paging import Snapshots
from kubesim.apiserver.watch_stream import StreamHub
from kubesim.errors import ApiError, status_body

CLUSTER = web.AppKey("cluster", object)
AUTH = web.AppKey("auth", Auth)
FAULTS = web.AppKey("faults", Faults)
STATS = web.AppKey("stats", Stats)
STREAMS = web.AppKey("streams", StreamHub)
SNAPSHOTS = web.AppKey("snapshots", Snapshots)

JSON = "application/json"


def json_response(body: dict | list, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(body), status=status, content_type=JSON)


def error_response(error: ApiError) -> web.Response:
    return json_response(error.status(), status=error.code)


def not_found() -> web.Response:
    return json_response(
        status_body(404, "NotFound", "the server could not find the requested resource"), 404
    )
