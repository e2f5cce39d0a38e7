"""Benchmarks for kubesim and the kueue_ray plugin (`make bench`); not part of `make test`.

Each module measures one figure of issues 2, 3 and 7 and returns plain dicts; `bench.run` runs them in one
go and prints the results next to their targets, so bench/README.md can quote one run verbatim.
"""
