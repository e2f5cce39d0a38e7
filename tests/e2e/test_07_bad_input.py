"""Bad input fails its task fast (within 15 s of the task starting) with a message that names the
problem and the fix, and creates nothing in the cluster; a priority outside the Param enum never even
becomes a run (Airflow's API answers 400).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from tests.e2e.harness import rayjob_creations

pytestmark = pytest.mark.timeout(300)

DAG = "e2e_rayjob"
BAD_SCHEMA = str(Path(__file__).resolve().parent / "templates" / "bad-schema.yaml.j2")

# id -> (conf, words the task log must contain: the problem and the fix)
CASES = {
    "unknown-local-queue": ({"queue": "no-such-queue"}, ["no-such-queue", "user-queue"]),
    "unknown-priority-class": ({"priority": "urgent-priority"}, ["urgent-priority", "dev-priority"]),
    "above-max-capacity": (
        {"template": "llm-train", "queue": "user-queue"},
        ["cluster-queue", "nominalQuota"],
    ),
    "template-schema-error": ({"template": BAD_SCHEMA}, ["headGroupSpec", "template"]),
    "yaml-injection": ({"values": {"submission_mode": "x\nkind: Pod"}}, ["submissionMode", "K8sJobMode"]),
    # KubeRay would wait for a spec.jobId nobody sets, and the RayJob could never be suspended (preempted).
    "interactive-mode": (
        {"values": {"submission_mode": "InteractiveMode"}},
        ["InteractiveMode", "K8sJobMode"],
    ),
    # A misspelt value would otherwise be dropped and the run trained with the template's default.
    "value-the-template-never-reads": ({"values": {"num_epoch": 2}}, ["num_epoch", "'num_epochs'"]),
    # RayJob names are hashed from the run (never too long); a queue name is copied into a label.
    "oversized-queue-name": ({"queue": "q" * 300}, ["kueue.x-k8s.io/queue-name", "63"]),
}


def seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_fails_fast_with_problem_and_fix_and_creates_nothing(e2e, case):
    conf, words = CASES[case]
    e2e.collect_requests()
    run_id = e2e.start_run(DAG, conf)

    run = e2e.wait_run(DAG, run_id, timeout=120)

    assert run["state"] == "failed"
    ti = e2e.ti(DAG, run_id, "submit")
    assert ti["state"] == "failed"
    assert seconds(ti["start_date"], ti["end_date"]) < 15
    log = e2e.task_log(DAG, run_id, "submit")
    missing = [word for word in words if word not in log]
    assert not missing, f"log lacks {missing}:\n{log[-3000:]}"
    assert "kind: Pod" not in [line.strip() for line in log.splitlines()]  # never parsed as YAML structure
    assert rayjob_creations(e2e.collect_requests()) == 0


def test_priority_outside_the_param_enum_is_refused_by_the_api(e2e):
    response = e2e.trigger("text_classifier_finetune", {"priority": "urgent-priority"})

    assert response.status_code == 400
    assert "urgent-priority" in response.text and "is not one of" in response.text
