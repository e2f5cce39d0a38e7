"""The HTTP layer: the Kubernetes REST API over aiohttp, faults, authentication, TLS.

It depends on the domain (``kubesim.cluster``, ``kubesim.store``, ``kubesim.resources``) and never the
other way round: the cluster runs the same with no HTTP server (the unit tests drive it in-process).
"""
