"""Serving: waiting on a RayService (its status model, watchdog, trigger, hook and rollout).
The DAG-facing operator stays ``kueue_ray.serving``."""
