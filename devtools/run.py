"""`make run`: kubesim with the Kueue setup applied + `airflow standalone` with our DAGs, unpaused.

With KUBECONFIG set, Airflow uses that (real) cluster and kubesim is not started. QUEUES=team applies the
team-queues setup instead of the single queue. Ctrl-C stops everything.
"""

from __future__ import annotations

import os
import signal
import sys

from devtools.airflow import PASSWORD, ROOT, USERNAME, start_airflow
from devtools.kubesim_process import start_kubesim

RUN_DIR = ROOT / ".run"


def main() -> int:
    kubesim = None
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        print(f"Using the cluster of KUBECONFIG={kubeconfig}; kubesim is not started.", flush=True)
    else:
        queues = os.environ.get("QUEUES", "single")
        kubesim = start_kubesim(RUN_DIR, queues=queues, time_scale=float(os.environ.get("TIME_SCALE", "1")))
        kubeconfig = str(kubesim.kubeconfig)
        print(f"kubesim ({queues} queue setup) at {kubesim.url}; kubeconfig {kubeconfig}", flush=True)
        print(f"  try: kubectl --kubeconfig {kubeconfig} get rayjobs,workloads -A", flush=True)
    airflow = None
    try:
        airflow = start_airflow(
            RUN_DIR / "airflow", kubeconfig=kubeconfig, port=int(os.environ.get("AIRFLOW_PORT", "8080"))
        )
        print(f"\nAirflow UI: {airflow.url}  login: {USERNAME} / {PASSWORD}", flush=True)
        print("Logs: .run/airflow/standalone.log. Press Ctrl-C to stop.", flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        print("\nStopping...", flush=True)
        if airflow is not None:
            airflow.stop()
        if kubesim is not None:
            kubesim.stop()
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)
    sys.exit(main())
