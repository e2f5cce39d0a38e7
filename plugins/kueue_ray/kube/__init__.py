"""The client layer: talking to the Kubernetes API server (one list+watch loop, pages, refusals,
the shared client, the server's clock). Nothing here knows Kueue or KubeRay."""
