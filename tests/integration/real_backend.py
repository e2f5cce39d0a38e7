"""The real control plane as the integration tests' ``kubesim`` fixture (``pytest --cluster=real``).

Tests that use only the Kubernetes API run unchanged. What only kubesim offers (its request log, injected
faults, token rotation, in-process cluster) is not in a real cluster: a test reaching for it is skipped
there with the reason, so the count of tests the real stack ran is honest.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from devtools.realcluster import RealCluster, RealClusterUnavailable, run_realcluster


class RealBackend:
    """``kubesim.testing.Kubesim``'s interface over a running ``RealCluster``."""

    cluster = None

    def __init__(self, real: RealCluster):
        self.url = real.url
        self.kubeconfig = real.kubeconfig
        self.token = real.token
        self.logs = real.logs

    def _kubesim_only(self, what: str):
        pytest.skip(f"kubesim-only: {what} has no counterpart on a real API server")

    def stats(self):
        self._kubesim_only("kubesim's request statistics")

    def requests(self):
        self._kubesim_only("kubesim's request log")

    def clear_requests(self):
        self._kubesim_only("kubesim's request log")

    def set_faults(self, **settings):
        self._kubesim_only("fault injection")

    def reset_faults(self):
        self._kubesim_only("fault injection")

    def refuse(self, code, **rule):
        self._kubesim_only("fault injection")

    def require_token(self, token):
        self._kubesim_only("rotating the server's token at run time")

    def write_kubeconfig_token(self, token):
        self._kubesim_only("rotating the server's token at run time")

    def call(self, fn, *args):
        self._kubesim_only("the in-process cluster")

    def __getattr__(self, name: str):
        """Any other of kubesim's test helpers (added users, clock offset, page caps, ...)."""
        if name.startswith("__"):
            raise AttributeError(name)
        self._kubesim_only(f"kubesim's {name}")


@contextmanager
def real_backend(**options) -> Iterator[RealBackend]:
    """A real control plane of its own (``run_realcluster(**options)``) as the ``kubesim`` fixture; the
    test is skipped, saying why, when the stack's binaries are not built."""
    stack = run_realcluster(**options)
    try:
        real = stack.__enter__()  # not `with`: only the start's unavailability is a skip
    except RealClusterUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield RealBackend(real)
    finally:
        stack.__exit__(None, None, None)
