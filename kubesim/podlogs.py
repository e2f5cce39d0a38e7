"""Container log buffers behind ``GET /api/v1/namespaces/{ns}/pods/{pod}/log``.

Controllers append what a simulated container prints; the API reads it back with the kubelet's options
(``container``, ``tailLines``, ``sinceSeconds``, ``timestamps``, ``follow``). Lines keep the real
wall-clock time they were written at, as the kubelet does, so ``timestamps=true`` output and
``sinceSeconds`` agree with what Airflow sees on its own clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kubesim.clock import Clock
from kubesim.errors import ApiError

_END = object()


@dataclass(slots=True)
class _Line:
    at_ns: int  # wall-clock nanoseconds since the epoch
    container: str
    text: str


@dataclass(slots=True, eq=False)  # identity hash: followers live in a set
class _Follower:
    container: str | None
    timestamps: bool
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)


@dataclass
class _PodLog:
    lines: list[_Line] = field(default_factory=list)
    followers: set = field(default_factory=set)
    closed: bool = False


def format_timestamp(at_ns: int) -> str:
    """RFC 3339 with nanoseconds and trailing zeros trimmed, like Go's ``time.RFC3339Nano``."""
    seconds, nanos = divmod(at_ns, 1_000_000_000)
    base = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{nanos:09d}".rstrip("0")
    return f"{base}.{fraction}Z" if fraction else f"{base}Z"


def _render(line: _Line, timestamps: bool) -> str:
    return f"{format_timestamp(line.at_ns)} {line.text}\n" if timestamps else f"{line.text}\n"


class PodLogs:
    """Per-pod, per-container log lines. ``"".join(follow(...))`` yields what ``read(...)`` returns."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or Clock()
        self._pods: dict[tuple[str, str], _PodLog] = {}

    def _now_ns(self) -> int:
        return int(self._clock.now().timestamp() * 1_000_000) * 1000  # datetimes stop at microseconds

    def append(self, namespace: str, pod: str, container: str, line: str) -> None:
        """Add output (one line, or several separated by newlines); reopens a closed pod's log."""
        log = self._pods.setdefault((namespace, pod), _PodLog())
        log.closed = False
        now = self._now_ns()
        for text in line.rstrip("\n").split("\n"):
            entry = _Line(now, container, text)
            log.lines.append(entry)
            for follower in log.followers:
                if follower.container in (None, container):
                    follower.queue.put_nowait(_render(entry, follower.timestamps))

    def read(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        *,
        tail_lines: int | None = None,
        since_seconds: float | None = None,
        timestamps: bool = False,
    ) -> str:
        log = self._pods.get((namespace, pod))
        if log is None:
            return ""
        lines = self._select(log, pod, container)
        if since_seconds is not None:
            cutoff = self._now_ns() - int(since_seconds * 1_000_000_000)
            lines = [line for line in lines if line.at_ns >= cutoff]
        if tail_lines is not None:
            lines = lines[-tail_lines:] if tail_lines > 0 else []
        return "".join(_render(line, timestamps) for line in lines)

    async def follow(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        *,
        tail_lines: int | None = None,
        timestamps: bool = False,
    ) -> AsyncIterator[str]:
        """Existing lines, then new ones as they are appended, until ``close(namespace, pod)``."""
        log = self._pods.setdefault((namespace, pod), _PodLog())
        backlog = self._select(log, pod, container)
        if tail_lines is not None:
            backlog = backlog[-tail_lines:] if tail_lines > 0 else []
        follower = _Follower(container, timestamps)
        if not log.closed:
            log.followers.add(follower)  # registered before the first await: no line can slip between
        try:
            for line in backlog:
                yield _render(line, timestamps)
            if log.closed:
                return
            while (item := await follower.queue.get()) is not _END:
                yield item
        finally:
            log.followers.discard(follower)

    def close(self, namespace: str, pod: str) -> None:
        """The containers stopped (or the pod is gone): end every ``follow`` of this pod."""
        log = self._pods.get((namespace, pod))
        if log is None:
            return
        log.closed = True
        for follower in log.followers:
            follower.queue.put_nowait(_END)
        log.followers.clear()

    def forget(self, namespace: str, pod: str) -> None:
        """Drop a deleted pod's logs (and end its followers)."""
        self.close(namespace, pod)
        self._pods.pop((namespace, pod), None)

    @staticmethod
    def _select(log: _PodLog, pod: str, container: str | None) -> list[_Line]:
        if container is not None:
            return [line for line in log.lines if line.container == container]
        containers = sorted({line.container for line in log.lines})
        if len(containers) > 1:
            raise ApiError(
                400,
                "BadRequest",
                f"a container name must be specified for pod {pod}, choose one of: [{' '.join(containers)}]",
            )
        return list(log.lines)
