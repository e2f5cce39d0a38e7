"""batch/v1 Jobs as a real cluster serves them: the API server's Job strategy (``strategy``, registered by
``Cluster``) and kube-controller-manager's Job controller with the kubelet for its pods (``controller``),
built by make_controller(cluster)."""

from kubesim.batch.controller import JobController


def make_controller(cluster) -> JobController:
    return JobController(cluster)
