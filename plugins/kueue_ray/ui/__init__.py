"""Kueue inside the Airflow UI: a "Kueue" tab on every task instance and a "Kueue queues" page.

Served by ``plugins/kueue_ray_ui_plugin.py`` (an Airflow plugin: one FastAPI app mounted at ``/kueue`` and
two external views) from the api-server process:

* ``cache``  one shared view of the cluster per api-server process: list+watch of RayJobs, Workloads,
  LocalQueues and ClusterQueues, shared TTL reads of Kueue's visibility API, and a live timeline per
  RayJob. Page views read it; they never call the Kubernetes API themselves.
* ``views``  pure: cluster objects + what the user may read -> the JSON both pages render.
* ``spans``  pure: a timeline's phase transitions -> the spans of the Kueue tab's chart.
* ``access`` who is asking, through Airflow's own auth manager, and which DAGs they may read.
* ``webapp`` the FastAPI app: the two HTML pages, their script, and the JSON API (``/kueue/api/v1``).

No build step: the pages are plain HTML with one small script (``static/``).
"""
