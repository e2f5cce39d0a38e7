"""Which Airflow deployment this is: the identity every object the plugin creates carries.

Several Airflow deployments (staging and prod, two teams) often share one cluster, one namespace and one
set of Kueue queues, and may run the same DAG with the same run id at the same moment (scheduled run ids
are deterministic). So every RayJob and RayService carries its deployment
(``naming.DEPLOYMENT_LABEL``, as label and annotation), its name hashes it, and every decision about
ownership compares it: adoption by a later try, deletion on kill, the janitor, the Kueue pages.

Where the value comes from, first found wins:

1. ``[kueue_ray] deployment`` (``AIRFLOW__KUEUE_RAY__DEPLOYMENT``): set it explicitly wherever you can
   (the Helm values and docker-compose do);
2. the Airflow Variable ``kueue_ray_deployment`` of this deployment's metadata database;
3. neither: a new value ``airflow-<8 hex>`` is generated and stored in that Variable on first use (by the
   api-server when it starts, else by the first task that needs it). Two deployments left at their
   defaults have two metadata databases, so two values: they never collide.

Changing the value makes the deployment a stranger to what it created before: its janitor and its kills
leave those objects alone, a retry submits anew instead of adopting, and the Kueue pages show them as
another Airflow's. Objects created before deployments existed (no label: *legacy*) keep working: a
waiting trigger still waits for and deletes its own; a retry adopts an unfinished one under its old name;
the janitor deletes one only on positive evidence from this deployment (its DAG run exists here and its
task ended), never because its run is missing (it may be another deployment's).

Pure apart from ``current`` (reads the option and the Variable) and ``ensure_stored`` (the api-server's
insert-if-absent).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from functools import cache

from kueue_ray.errors import KueueRayError
from kueue_ray.naming import DEPLOYMENT_LABEL, is_label_value
from kueue_ray.options import SECTION

CONFIG_KEY = "deployment"
VARIABLE = "kueue_ray_deployment"
VARIABLE_DESCRIPTION = (
    "This Airflow deployment's identity on Kubernetes (label kueue-ray.airflow.apache.org/deployment on every "
    "RayJob and RayService it creates). Generated on first use; [kueue_ray] deployment overrides it. "
    "Changing it makes this deployment a stranger to the objects it created before."
)
SETTLE_SECONDS = 1.0
"""After storing a generated value, how long a task waits before reading the Variable back: two first
tasks of a fresh deployment that both found no value both read back the one stored last."""


class DeploymentError(KueueRayError):
    """The configured deployment identity cannot be a label value."""


def validate(value: str, source: str) -> str:
    """``value`` as a label value (at most 63 of [A-Za-z0-9._-], alphanumeric at both ends), else an error
    naming where it came from and how to fix it."""
    if value and is_label_value(value):
        return value
    raise DeploymentError(
        "the Airflow deployment identity must be a Kubernetes label value",
        field=source,
        value=value,
        fix=(
            "use at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, "
            "e.g. 'prod' or 'staging-eu' (it becomes the label " + DEPLOYMENT_LABEL + ")"
        ),
    )


def generate() -> str:
    return f"airflow-{secrets.token_hex(4)}"


def configured() -> str | None:
    """``[kueue_ray] deployment``, validated; None when unset."""
    from airflow.configuration import conf

    value = (conf.get(SECTION, CONFIG_KEY, fallback="") or "").strip()
    return validate(value, f"[{SECTION}] {CONFIG_KEY}") if value else None


def resolve(
    configured_value: str | None,
    read: Callable[[], str | None],
    store: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """The deployment identity from the option, else the Variable (``read``), else a generated one that is
    ``store``d and read back after ``SETTLE_SECONDS``."""
    if configured_value:
        return configured_value
    stored = read()
    if not stored:
        store(generate())
        sleep(SETTLE_SECONDS)
        stored = read()
    return validate(stored or "", f"the Airflow Variable {VARIABLE}")


@cache
def current() -> str:
    """This deployment's identity, in a task (worker or triggerer): option, Variable, or generated; read
    once per process."""
    from airflow.sdk import Variable

    def store(value: str) -> None:
        Variable.set(VARIABLE, value, description=VARIABLE_DESCRIPTION)

    return resolve(configured(), lambda: Variable.get(VARIABLE, default=None), store)


def ensure_stored() -> str:
    """This deployment's identity in a component with the metadata database (the api-server): the option,
    else the Variable, inserted if absent in one transaction, so concurrent starts agree on one value."""
    value = configured()
    if value:
        return value
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session
    from sqlalchemy.exc import IntegrityError

    try:
        with create_session() as session:
            if session.query(Variable).filter(Variable.key == VARIABLE).first() is None:
                session.add(Variable(key=VARIABLE, val=generate(), description=VARIABLE_DESCRIPTION))
    except IntegrityError:
        pass  # another component inserted it first: read theirs
    with create_session() as session:
        row = session.query(Variable).filter(Variable.key == VARIABLE).one()
        return validate(row.val, f"the Airflow Variable {VARIABLE}")
