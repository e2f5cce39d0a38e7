"""How kubesim reads a Ray job's run from the RayJob itself (entrypoint, runtime env), as a real cluster
would run it: no kubesim-only annotation needed."""

from __future__ import annotations

import math

import pytest
import yaml

from kubesim.entrypoint import DEFAULT_DURATION, EPOCH_SECONDS, Entrypoint
from kubesim.kuberay.dashboard import RUNTIME_ENV_SETUP, Behaviour


def rayjob(
    entrypoint: str = "python train.py", env: dict | None = None, annotations: dict | None = None
) -> dict:
    spec = {"entrypoint": entrypoint}
    if env is not None:
        spec["runtimeEnvYAML"] = yaml.safe_dump({"pip": ["torch"], "env_vars": env})
    return {"metadata": {"name": "j", "annotations": annotations or {}}, "spec": spec}


@pytest.mark.parametrize(
    ("command", "sleep", "epochs", "exit_code"),
    [
        ("sleep 30", 30.0, None, 0),
        ("sleep infinity", math.inf, None, 0),
        ("sleep 5 && sleep 2.5", 7.5, None, 0),
        ("sleep 10; exit 1", 10.0, None, 1),
        ("python train.py || exit 3", 0.0, None, 3),
        ("exit 2; sleep 100", 0.0, None, 2),  # what follows exit never runs
        ("python train.py --epochs 4", 0.0, 4, 0),
        ("python train.py --num-epochs=7 --lr 0.1", 0.0, 7, 0),
        ("NUM_EPOCHS=5 python train.py", 0.0, 5, 0),
        ("python -c 'print(\"sleep 99\")'", 0.0, None, 0),  # quoted text is an argument, not a command
        ("python 'unbalanced", 0.0, None, 0),
    ],
)
def test_entrypoint_is_read_as_a_shell_would_run_it(command, sleep, epochs, exit_code):
    assert Entrypoint.parse(command) == Entrypoint(sleep=sleep, epochs=epochs, exit_code=exit_code)


def test_epochs_from_the_runtime_env_set_duration_and_driver_epochs():
    behaviour = Behaviour.for_attempt(rayjob(env={"NUM_EPOCHS": "3", "BATCH_SIZE": "16"}), 0)
    assert (behaviour.epochs, behaviour.duration, behaviour.outcome) == (3, 3 * EPOCH_SECONDS, "Succeeded")
    assert Behaviour.for_attempt(rayjob(env={"EPOCHS": "2"}), 0).epochs == 2


def test_entrypoint_epochs_win_over_the_runtime_env_and_sleeps_add_up():
    behaviour = Behaviour.for_attempt(rayjob("sleep 5 && python t.py --epochs 2", env={"NUM_EPOCHS": "9"}), 0)
    assert (behaviour.epochs, behaviour.duration) == (2, 5 + 2 * EPOCH_SECONDS)


def test_a_rayjob_that_says_nothing_runs_the_default_duration():
    behaviour = Behaviour.for_attempt(rayjob(), 0)
    assert (behaviour.duration, behaviour.epochs, behaviour.outcome) == (DEFAULT_DURATION, None, "Succeeded")


def test_non_zero_exit_fails_the_ray_job_with_that_code():
    behaviour = Behaviour.for_attempt(rayjob("sleep 4; exit 3"), 0)
    assert (behaviour.outcome, behaviour.exit_code, behaviour.duration) == ("AppFailed", 3, 4.0)
    assert not behaviour.simulated_failure


def test_packages_to_install_keep_the_job_pending_first():
    with_packages = rayjob(env={"NUM_EPOCHS": "1"})  # the helper's runtime env installs torch
    assert Behaviour.for_attempt(with_packages, 0).setup == RUNTIME_ENV_SETUP
    assert Behaviour.for_attempt(rayjob(), 0).setup == 0


def test_test_only_annotations_still_override():
    annotations = {"kubesim.dev/duration": "12", "kubesim.dev/fail-attempts": "1"}
    first = Behaviour.for_attempt(rayjob(annotations=annotations), 0)
    second = Behaviour.for_attempt(rayjob(annotations=annotations), 1)
    assert (first.duration, first.outcome, second.outcome) == (12.0, "AppFailed", "Succeeded")
    submission = Behaviour.for_attempt(rayjob(annotations={"kubesim.dev/outcome": "SubmissionFailed"}), 0)
    assert submission.outcome == "SubmissionFailed"
