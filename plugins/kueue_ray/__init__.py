"""kueue_ray: run Airflow tasks as KubeRay RayJobs, and serve models as RayServices, that Kueue queues,
prioritises and admits.

The package is split so that the decisions can be tested without a cluster or an Airflow runtime:

* pure core (plain dicts in, plain data out; imports neither Airflow nor the Kubernetes clients):
  ``status`` (what a RayJob + its Workload mean), ``manifests`` (template -> validated RayJob body and the
  quota it will ask Kueue for), ``naming`` (deterministic names, label/annotation keys), ``quantity``
  (Kubernetes resource quantities), ``priority`` (run type -> WorkloadPriorityClass), ``timeline``
  (what happened while waiting), ``orphans`` (which RayJobs no task will wait for again),
  ``service_status`` (what a RayService, its clusters and their Workloads mean) and ``errors``;
* DAG-facing declarations: ``params`` (the Trigger-form Params every DAG offers: priority class and
  LocalQueue; Airflow's ``Param`` and nothing else);
* I/O side: the hooks (``hook``, ``service_hook``), the triggerer's watch hub, the triggers (``trigger``,
  ``service_trigger``), the operators (``operators``: RayJobs; ``serving``: RayServices; ``publish``: an
  Asset event for a RayJob's output), the sensor and the janitor.

Submodules are deliberately not imported here: importing the package from a DAG file must stay cheap and
must never pull in ``kubernetes``. For the same reason the operator and sensor modules import the trigger,
hub, status, hook and manifests only inside the methods that run on a worker or the triggerer.
"""
