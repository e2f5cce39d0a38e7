"""kubesim: the Kubernetes API, KubeRay and Kueue, emulated in one process for tests and demos."""
