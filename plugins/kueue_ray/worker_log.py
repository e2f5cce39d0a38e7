"""Following the Ray driver log on a MultiKueue worker cluster while the Ray job runs there.

MultiKueue deletes the worker's copy of a RayJob, and with it the submitter pod whose log is the driver's
output, as soon as the job finishes (``workload.go`` reconcileGroup, step 2): a wait that reads the log once
the manager's mirrored status says the job ended finds nothing (on kubesim the copy is gone before the
manager's RayJob says Complete). So a wait that wants a log tail follows the submitter's log through the
worker's connection (``kueue_ray.multikueue.worker_connection_id``) while the job is admitted there, as
``kubectl logs -f`` would, keeping the last lines; the task shows them at the end when the worker no longer
has them. One stream per running MultiKueue RayJob, opened only when its task shows a log tail.

``LogBuffer`` is the pure part; ``DriverLog`` holds the rule both waits follow (one stream per worker the
RayJob runs on, the previous one stopped when it moves); ``follow`` runs in the triggerer
(kubernetes_asyncio), ``FollowThread`` in a worker slot (the ``kubernetes`` client).
"""

from __future__ import annotations

import asyncio
import codecs
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kueue_ray.hook_common import SUBMITTER_CONTAINER, SUBMITTER_JOB_LABEL

WORKER_TAIL_KEY = "driver_log_tail"
"""The payload key of the driver log a wait followed on a MultiKueue worker (``kueue_ray.worker_log``)."""


def with_worker_tail(payload: dict[str, Any] | None, tail: str | None) -> dict[str, Any] | None:
    """``payload`` carrying the driver log followed on a worker (nothing added without one)."""
    if payload is not None and tail:
        payload[WORKER_TAIL_KEY] = tail
    return payload


RETRY_SECONDS = 1.0
"""How long to wait before looking for the submitter pod again (not created yet, or its log not ready)."""


class LogBuffer:
    """The last ``lines`` lines of one log stream, fed in chunks that may split lines, and characters: a
    UTF-8 character cut between two chunks is decoded whole once its last byte arrives.

    >>> buffer = LogBuffer(2)
    >>> buffer.feed(b"one\\ntw"); buffer.feed(b"o\\nthree\\nfo")
    >>> buffer.text()
    'two\\nthree\\nfo'
    >>> buffer = LogBuffer(2)
    >>> delta = "loss \N{GREEK SMALL LETTER DELTA} 0.1".encode()
    >>> buffer.feed(delta[:6]); buffer.feed(delta[6:])
    >>> buffer.text() == "loss \N{GREEK SMALL LETTER DELTA} 0.1"
    True
    """

    def __init__(self, lines: int) -> None:
        self.lines: deque[str] = deque(maxlen=max(1, lines))
        self.partial = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def restart(self) -> None:
        """A new stream from the log's beginning replaces what was kept."""
        self.lines.clear()
        self.partial = ""
        self._decoder.reset()

    def feed(self, chunk: bytes) -> None:
        text = self.partial + self._decoder.decode(chunk)
        *complete, self.partial = text.split("\n")
        self.lines.extend(line + "\n" for line in complete)

    def text(self) -> str | None:
        """What was kept; None when nothing was read."""
        kept = "".join(self.lines) + self.partial
        return kept or None


class DriverLog:
    """The driver log of one RayJob, followed on the MultiKueue worker it runs on while its task shows a
    tail (``lines`` > 0): ``start(worker, buffer)`` opens a follower and returns what stops it (an asyncio
    task's ``cancel``, a ``FollowThread``'s ``stop``); a follower that cannot start (no connection to the
    worker) ends the following, and the end of the wait says which connection to create.

    >>> started = []
    >>> log = DriverLog(5, lambda worker, buffer: started.append(worker) or (lambda: started.append("stop")))
    >>> log.observe("w1"); log.observe("w1"); log.observe("w2"); log.stop()
    >>> started
    ['w1', 'stop', 'w2', 'stop']
    """

    def __init__(self, lines: int, start: Callable[[str, LogBuffer], Callable[[], Any]]) -> None:
        self.lines = lines
        self._start = start
        self._worker: str | None = None
        self._buffer: LogBuffer | None = None
        self._stop: Callable[[], Any] | None = None

    def observe(self, worker: str | None) -> None:
        """The RayJob runs on ``worker`` (None: on no worker): follow its log there, once per worker."""
        if not worker or self.lines <= 0 or worker == self._worker:
            return
        self.stop()
        buffer = LogBuffer(self.lines)
        try:
            self._stop = self._start(worker, buffer)
        except Exception:  # noqa: BLE001 - see the class
            self.lines = 0
            return
        self._worker, self._buffer = worker, buffer

    def text(self) -> str | None:
        """The last lines followed; None when nothing was."""
        return self._buffer.text() if self._buffer is not None else None

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None


def _newest(pods: list[Any]) -> Any | None:
    return max(pods, key=lambda p: p.metadata.creation_timestamp or 0) if pods else None


def _ended(pod: Any) -> bool:
    return (pod.status.phase if pod.status else None) in ("Succeeded", "Failed")


async def follow(hook: Any, name: str, namespace: str, buffer: LogBuffer) -> None:
    """Follow the newest submitter pod of RayJob ``name`` through ``hook`` (an ``AsyncRayJobHook`` on the
    worker's connection) into ``buffer`` until cancelled; a pod read to its end is not read again."""
    from kubernetes_asyncio.client import CoreV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    read_to_end: str | None = None
    async with hook.get_conn() as client:
        core = CoreV1Api(client)
        while True:
            try:
                pods = await core.list_namespaced_pod(
                    namespace, label_selector=f"{SUBMITTER_JOB_LABEL}={name}"
                )
                pod = _newest(pods.items)
                if pod is not None and pod.metadata.uid != read_to_end:
                    response = await core.read_namespaced_pod_log(
                        pod.metadata.name,
                        namespace,
                        container=SUBMITTER_CONTAINER,
                        follow=True,
                        _preload_content=False,
                    )
                    buffer.restart()
                    try:
                        async for chunk in response.content.iter_any():
                            buffer.feed(chunk)
                    finally:
                        response.release()
                    if _ended(pod):
                        read_to_end = pod.metadata.uid
            except ApiException:  # not created yet, its container not started, or deleted: look again
                pass
            await asyncio.sleep(RETRY_SECONDS)


async def follow_quietly(hook: Any, name: str, namespace: str, buffer: LogBuffer) -> None:
    """``follow`` as a task of its own: a log that cannot be read (no connection to the worker, refused)
    only leaves the tail out, and the end of the wait says why."""
    try:
        await follow(hook, name, namespace, buffer)
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 - see above
        return


class FollowThread:
    """``follow`` in a worker slot: a daemon thread with the synchronous client of ``hook`` (a
    ``RayJobHook`` on the worker's connection); ``stop`` ends it."""

    def __init__(self, hook: Any, name: str, namespace: str, buffer: LogBuffer) -> None:
        self.hook, self.name, self.namespace, self.buffer = hook, name, namespace, buffer
        self._stopped = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"driver-log-{name}")
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        response = self._response
        if response is not None:
            response.close()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            core = self.hook.core_v1_client
        except Exception:  # noqa: BLE001 - no connection to the worker: the task's end says which to create
            return
        read_to_end = None
        while not self._stopped.is_set():
            try:
                pods = core.list_namespaced_pod(
                    self.namespace, label_selector=f"{SUBMITTER_JOB_LABEL}={self.name}"
                )
                pod = _newest(pods.items)
                if pod is not None and pod.metadata.uid != read_to_end:
                    self._response = core.read_namespaced_pod_log(
                        pod.metadata.name,
                        self.namespace,
                        container=SUBMITTER_CONTAINER,
                        follow=True,
                        _preload_content=False,
                    )
                    self.buffer.restart()
                    for chunk in self._response.stream(4096):
                        self.buffer.feed(chunk)
                    if _ended(pod):
                        read_to_end = pod.metadata.uid
            except ApiException:  # not created yet, its container not started, or deleted: look again
                pass
            except Exception:  # noqa: BLE001 - a closed stream (stop) or a dropped connection: look again
                if self._stopped.is_set():
                    return
            finally:
                self._response = None
            time.sleep(RETRY_SECONDS)
