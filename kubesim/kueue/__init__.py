"""Kueue v0.19.2 for kubesim: webhooks, job integration and Workload lifecycle, scheduler, visibility API.

`install` registers what must exist before any object is accepted (the admission webhooks, the visibility
API); `run` is the controller loop. The scheduler's decisions are pure (`kubesim.kueue.scheduler`).
The imports are local so that importing a pure submodule (``kubesim.kueue.model``) stays cheap.
"""

from __future__ import annotations

_CONTROLLER_ATTR = "_kueue_controller"


def _controller(cluster):
    from kubesim.kueue.controller import KueueController

    controller = getattr(cluster, _CONTROLLER_ATTR, None)
    if controller is None:
        controller = KueueController(cluster)
        setattr(cluster, _CONTROLLER_ATTR, controller)
    return controller


def install(cluster) -> None:
    from kubesim.kueue import visibility
    from kubesim.kueue.webhook import make_admission_hook

    controller = _controller(cluster)
    cluster.store.add_admission_hook(make_admission_hook(cluster.store, controller.config.frameworks))
    handler = visibility.make_handler(cluster.store, controller.seq)
    cluster.register_api(visibility.GROUP, visibility.VERSION, visibility.RESOURCES, handler)


async def run(cluster) -> None:
    await _controller(cluster).run()
