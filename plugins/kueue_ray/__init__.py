"""kueue_ray: run Airflow tasks as KubeRay RayJobs that Kueue queues, prioritises and admits.

The package is split so that the decisions can be tested without a cluster or an Airflow runtime:

* pure core (plain dicts in, plain data out; imports neither Airflow nor the Kubernetes clients):
  ``status`` (what a RayJob + its Workload mean), ``manifests`` (template -> validated RayJob body and the
  quota it will ask Kueue for), ``naming`` (deterministic names, label/annotation keys), ``quantity``
  (Kubernetes resource quantities), ``priority`` (run type -> WorkloadPriorityClass), ``timeline``
  (what happened while waiting) and ``errors``;
* I/O side: the hook, the triggerer's watch hub, the trigger, the operator and the sensor.

Submodules are deliberately not imported here: importing the package from a DAG file must stay cheap and
must never pull in ``kubernetes``.
"""
