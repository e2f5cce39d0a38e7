"""batch/v1 Jobs as a real cluster runs them: kube-controller-manager's Job controller (``controller``),
built by make_controller(cluster), and what a Job pod's container does (``container``). The API server's
Job strategy is ``kubesim.job_strategy`` (``Cluster`` registers it, so it holds without controllers)."""

from kubesim.batch.controller import JobController


def make_controller(cluster) -> JobController:
    return JobController(cluster)
