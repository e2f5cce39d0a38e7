"""The deployment identity: where it comes from, and the errors for a value that cannot be a label."""

import pytest
from kueue_ray.deployment import VARIABLE, DeploymentError, generate, resolve, validate
from kueue_ray.naming import is_label_value


def test_the_option_wins_and_the_variable_is_not_even_read():
    def read():
        raise AssertionError("the Variable must not be read when the option is set")

    assert resolve("prod", read, lambda value: None) == "prod"


def test_a_stored_identity_is_used_as_it_is():
    stored = []
    assert resolve(None, lambda: "airflow-0a1b2c3d", stored.append) == "airflow-0a1b2c3d"
    assert stored == []


def test_a_fresh_deployment_stores_a_generated_identity_and_uses_what_is_stored_after_settling():
    """Two first tasks racing: each stores its own, both read back the one stored last."""
    variable: dict[str, str] = {}
    slept = []

    def store(value: str) -> None:
        variable[VARIABLE] = value
        variable[VARIABLE] = "airflow-ffffffff"  # the other task's store landed after ours

    chosen = resolve(None, lambda: variable.get(VARIABLE), store, sleep=slept.append)
    assert chosen == "airflow-ffffffff" and slept == [1.0]


def test_generated_identities_are_label_values_and_differ():
    values = {generate() for _ in range(50)}
    assert len(values) == 50 and all(is_label_value(v) and v.startswith("airflow-") for v in values)


@pytest.mark.parametrize("bad", ["Prod Cluster", "-prod", "x" * 64, "prod/eu"])
def test_a_value_that_cannot_be_a_label_names_the_option_the_value_and_the_fix(bad):
    with pytest.raises(DeploymentError) as error:
        validate(bad, "[kueue_ray] deployment")
    message = str(error.value)
    assert message.startswith(
        "[kueue_ray] deployment: the Airflow deployment identity must be a Kubernetes label"
    )
    assert repr(bad) in message and "e.g. 'prod'" in message
