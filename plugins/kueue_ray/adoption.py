"""What a task try does with the RayJobs earlier tries of its task instance submitted (pure, no I/O).

One try, one run of the work:

* an earlier try's RayJob that has not finished is *adopted*: that try's worker died mid-wait (or the
  task was cleared while it waited), and submitting again would queue a duplicate behind Kueue's quota;
* a finished one (succeeded, failed, stopped, deactivated) is never run again: Clear and retries are how
  Airflow users re-run work, so this try submits a RayJob of its own, and the earlier one stays readable
  (its logs, the Kueue tab of its try) until retention removes it;
* unless the task asked for memoization (``reuse_succeeded``): then an earlier success is taken as this
  try's result, logged at WARNING because the work is skipped.

The operator reads the candidates (``earlier``: every try's RayJob of this task instance in this
deployment, and the one legacy name a pre-upgrade RayJob had) and acts on the ``Plan``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import StrEnum

from kueue_ray.naming import AirflowIdentity
from kueue_ray.phases import Phase
from kueue_ray.status import Observation


class Choice(StrEnum):
    ADOPT = "adopt"
    """Wait for an earlier try's unfinished RayJob (or this try's own)."""
    REUSE = "reuse"
    """Take an earlier try's success as this try's result (``reuse_succeeded``)."""
    SUBMIT = "submit"
    """Create this try's own RayJob."""


@dataclass(frozen=True)
class Earlier:
    """A RayJob of this task instance found in the cluster, who submitted it and what it is doing."""

    rayjob: dict
    holder: AirflowIdentity
    observation: Observation

    @property
    def where(self) -> str:
        metadata = self.rayjob["metadata"]
        return f"{metadata.get('namespace')}/{metadata.get('name')}"


@dataclass(frozen=True)
class Plan:
    choice: Choice
    chosen: Earlier | None = None
    lines: list[tuple[int, str]] = field(default_factory=list)
    """(logging level, text) for the task log, in order."""


def _newest(found: list[Earlier]) -> Earlier:
    return max(
        found, key=lambda e: (e.holder.try_number, e.rayjob["metadata"].get("creationTimestamp") or "")
    )


def plan(identity: AirflowIdentity, earlier: list[Earlier], *, reuse_succeeded: bool = False) -> Plan:
    """What try ``identity`` does with ``earlier`` (RayJobs of the same task instance, any try)."""
    mine = [e for e in earlier if identity.same_task(e.holder) or _legacy_of(identity, e.holder)]
    alive = [e for e in mine if not e.rayjob["metadata"].get("deletionTimestamp")]
    own = [e for e in alive if e.holder == identity]
    if own:
        return Plan(Choice.ADOPT, own[0], [(logging.INFO, _adopting(own[0], "this try's own RayJob"))])
    unfinished = [e for e in alive if not e.observation.terminal]
    if unfinished:
        chosen = _newest(unfinished)
        lines = [(logging.INFO, _adopting(chosen, f"submitted by try {chosen.holder.try_number}"))]
        for other in unfinished:
            if other is not chosen:
                lines.append(
                    (
                        logging.WARNING,
                        f"RayJob {other.where} of try {other.holder.try_number} is unfinished too "
                        f"({other.observation.describe()}); it is not adopted, and the janitor removes it "
                        f"once no task waits for it",
                    )
                )
        return Plan(Choice.ADOPT, chosen, lines)
    finished = sorted((e for e in alive if e.observation.terminal), key=lambda e: e.holder.try_number)
    succeeded = [e for e in finished if e.observation.phase is Phase.SUCCEEDED]
    if reuse_succeeded and succeeded:
        chosen = _newest(succeeded)
        return Plan(
            Choice.REUSE,
            chosen,
            [
                (
                    logging.WARNING,
                    f"reuse_succeeded=True: RayJob {chosen.where} of try {chosen.holder.try_number} "
                    f"succeeded, so this try runs no work and takes that result as its own",
                )
            ],
        )
    lines = [
        (
            logging.INFO,
            f"RayJob {e.where} of try {e.holder.try_number} already ended {e.observation.phase.value}; this "
            f"try {identity.try_number} submits a new RayJob (a finished RayJob is never run again"
            + ("; reuse_succeeded=True would skip the work after a success" if e in succeeded else "")
            + "). The earlier one stays readable until retention removes it",
        )
        for e in finished
    ]
    return Plan(Choice.SUBMIT, None, lines)


def _legacy_of(identity: AirflowIdentity, holder: AirflowIdentity) -> bool:
    """A RayJob of this task instance created before RayJobs carried their deployment: this deployment's
    retry may adopt it (it runs under the task instance's old name)."""
    return not holder.deployment and (holder.dag_id, holder.task_id, holder.run_id, holder.map_index) == (
        identity.dag_id,
        identity.task_id,
        identity.run_id,
        identity.map_index,
    )


def _adopting(earlier: Earlier, whose: str) -> str:
    return f"Adopting RayJob {earlier.where} (uid {earlier.rayjob['metadata'].get('uid')}), {whose}: " + (
        earlier.observation.describe()
    )
