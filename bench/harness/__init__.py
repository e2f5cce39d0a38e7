"""What the kubesim benchmarks share, so that each benchmark module holds only what it measures.

* ``cluster``: the queue every benchmark waits in (a 1-CPU ClusterQueue held by a ``blocker`` RayJob),
  the RayJobs queued behind it, the quota raise that lets them run, kubesim's fault rules, and a raw
  watch that sees each RayJob's terminal status (the detection latency's reference).
* ``workers``: the child processes under measurement (``bench.trigger_worker``, ``bench.polling_worker``),
  their environment and spec file, and one kubesim per run; ``protocol``: their side of the line protocol
  (records out, commands in, their own CPU and RSS).
* ``phases``: the run's phase boundaries with kubesim's CPU at each, and ``wait_until``.
* ``accounting``: kubesim's request counts between two moments, the harness's own left out.
* ``triggers``: the trigger worker's startup and waves as every trigger benchmark runs them.
* ``polling``: the polling baseline (the cncf provider's trigger shape) at the same N.
* ``airflow``: one ``airflow standalone`` on PostgreSQL with kubesim, for the benchmarks that need Airflow.
"""
