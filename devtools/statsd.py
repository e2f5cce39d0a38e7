"""A real StatsD server's receiving end for the e2e tests and the benchmarks: a UDP socket on localhost that
keeps every metric line Airflow sends (``[metrics] statsd_on``), parsed as StatsD's wire format.

Airflow's StatsD backend (``statsd_influxdb_enabled``) writes tags into the name the InfluxDB way
(``airflow.kueue_ray.admissions,queue=user-queue,priority=dev-priority:1|c``), which is what Telegraf and
Prometheus' statsd_exporter read; ``Metric.tags`` splits them out again.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Metric:
    """One StatsD line: ``name[,tag=value...]:value|type[|@rate]``, and when it arrived."""

    name: str
    tags: dict[str, str]
    value: float
    kind: str
    """``c`` counter, ``ms`` timer, ``g`` gauge."""
    at: float = field(compare=False)

    @classmethod
    def parse(cls, line: str, at: float) -> Metric | None:
        head, _, rest = line.partition(":")
        if not rest:
            return None
        value, _, kind = rest.partition("|")
        name, *pairs = head.split(",")
        tags = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
        try:
            number = float(value)
        except ValueError:
            return None
        return cls(name=name, tags=tags, value=number, kind=kind.split("|")[0], at=at)


class StatsdListener:
    """A UDP StatsD listener on 127.0.0.1 (``port``), collecting in a thread until ``stop()``."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.settimeout(0.2)
        self.port: int = self._socket.getsockname()[1]
        self.metrics: list[Metric] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._receive, name="statsd-listener", daemon=True)
        self._thread.start()

    def airflow_env(self, *, tags: bool = True) -> dict[str, str]:
        """The ``[metrics]`` settings that make an Airflow send its metrics here."""
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": str(tags),
        }

    def _receive(self) -> None:
        while not self._stopped.is_set():
            try:
                data = self._socket.recv(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            now = time.time()
            parsed = [Metric.parse(line, now) for line in data.decode(errors="replace").splitlines()]
            with self._lock:
                self.metrics.extend(metric for metric in parsed if metric is not None)

    def received(self, predicate: Callable[[Metric], bool] = lambda _: True) -> list[Metric]:
        with self._lock:
            return [metric for metric in self.metrics if predicate(metric)]

    def named(self, name: str, **tags: str) -> list[Metric]:
        """Every metric called ``name`` (without Airflow's prefix) whose tags include ``tags``."""
        return self.received(
            lambda m: m.name.split(".", 1)[-1] == name and all(m.tags.get(k) == v for k, v in tags.items())
        )

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=2)
        self._socket.close()
