"""A RayJob's timeline as the spans the Kueue tab draws: queued, admitted, running, preempted, requeued,
finished, each with its start, duration and the words Kueue or KubeRay used.

Input is a :class:`~kueue_ray.timeline.Timeline` in its JSON form (``to_dict``): the ``timeline`` XCom a
task writes when it stops waiting, or the live one the UI's cache keeps. Both carry ``transitions`` (one
per phase change). An older XCom without them still has its admissions and preemptions, from which the
same spans are rebuilt with less detail (no running span of its own).

Pure: no Airflow, no Kubernetes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kueue_ray.narration import readable_quantities
from kueue_ray.phases import FINISHED_SPAN, PHASE_SPAN_KINDS, SERVICE_PHASE_SPAN_KINDS, TERMINAL_PHASES, Phase
from kueue_ray.timeline import to_epoch, to_iso
from kueue_ray.workload import EVICTED_BY_PREEMPTION

LABELS = {
    "submitted": "Submitted: waiting for Kueue to create the Workload",
    "queued": "Queued: waiting for quota",
    "requeued": "Requeued after an eviction: waiting for quota again",
    "inadmissible": "Inadmissible: waiting cannot help until the queue or its quota changes",
    "quota_reserved": "Quota reserved: waiting for admission checks",
    "admitted": "Admitted: quota reserved, the Ray cluster is starting",
    "running": "Running",
    "retrying": "Retrying: an attempt failed, KubeRay starts another",
    "preempted": "Preempted: evicted by Kueue, the Ray cluster is being torn down",
    "evicted": "Evicted by Kueue (not a preemption), the Ray cluster is being torn down",
    FINISHED_SPAN: "Finished",
}
_JOB_UID = re.compile(r"JobUID: ([^,\s)]+)")


def kind_of(phase: str, kinds: Mapping[str, str] = PHASE_SPAN_KINDS) -> str:
    """The span kind of a phase in ``kinds`` (a RayJob's by default, ``kueue_ray.phases``); a phase it
    does not know (an XCom written by another version) keeps its own name, lower-cased."""
    return kinds.get(phase) or phase.lower()


def preemptor_job_uid(message: str | None) -> str | None:
    """The preemptor's job uid from Kueue's message ("Preempted to accommodate a workload (UID: <wl>,
    JobUID: <job>) due to ..."); None when Kueue did not know it ("UNKNOWN") or the text differs."""
    match = _JOB_UID.search(message or "")
    if match is None or match.group(1) == "UNKNOWN":
        return None
    return match.group(1)


def transitions_of(timeline: dict[str, Any]) -> list[dict]:
    """The timeline's phase changes as [{"at": epoch, "phase", "reason", "message"}], oldest first."""
    if timeline.get("transitions"):
        return [{**t, "at": to_epoch(t["at"])} for t in timeline["transitions"] if t.get("at") is not None]
    # An XCom written before transitions were kept: rebuild them from admissions and preemptions.
    moments: list[dict] = []
    if timeline.get("submitted_at"):
        moments.append({"at": to_epoch(timeline["submitted_at"]), "phase": Phase.QUEUED.value})
    for admission in timeline.get("admissions") or ():
        moments.append({"at": to_epoch(admission["at"]), "phase": Phase.ADMITTED.value})
    for preemption in timeline.get("preemptions") or ():
        at = to_epoch(preemption["at"])
        words = {"reason": preemption.get("reason") or "", "message": preemption.get("message") or ""}
        moments.append({"at": at, "phase": Phase.PREEMPTED.value, **words})
        moments.append({"at": at, "phase": Phase.QUEUED.value})
    if timeline.get("finished_at") and timeline.get("final_phase"):
        moments.append({"at": to_epoch(timeline["finished_at"]), "phase": timeline["final_phase"]})
    moments.sort(key=lambda m: m["at"])  # stable: a preemption's requeue stays after it
    return [{"reason": "", "message": "", **m} for m in moments]


def build_spans(
    timeline: dict[str, Any], now: float, kinds: Mapping[str, str] = PHASE_SPAN_KINDS
) -> list[dict]:
    """Spans from the transitions: each lasts until the next one (the current one until ``now``); the
    terminal phase is a zero-length "finished" span carrying the outcome.

    A queued span after the job had already been preempted or evicted is "requeued".
    """
    transitions = transitions_of(timeline)
    spans: list[dict] = []
    preempted_before = False
    for index, transition in enumerate(transitions):
        kind = kind_of(transition["phase"], kinds)
        if kind == "queued" and preempted_before:
            kind = "requeued"
        start = transition["at"]
        if kind == FINISHED_SPAN:
            end = start
        elif index + 1 < len(transitions):
            end = transitions[index + 1]["at"]
        else:
            end = max(now, start)
        span = {
            "kind": kind,
            "phase": transition["phase"],
            "label": LABELS.get(kind, transition["phase"].title()),
            "start": to_iso(start),
            "end": to_iso(end),
            "duration_seconds": round(end - start, 3),
            "ongoing": kind != FINISHED_SPAN and index + 1 == len(transitions),
            "reason": transition.get("reason") or "",
            "message": readable_quantities(transition.get("message") or ""),
        }
        if kind == FINISHED_SPAN and transition["phase"] not in {p.value for p in TERMINAL_PHASES}:
            span["label"] = f"Finished waiting: {transition['phase'].replace('_', ' ').lower()}"
        if kind in ("preempted", "evicted"):
            preempted_before = True
        if kind == "preempted":
            span["preemptor_job_uid"] = preemptor_job_uid(span["message"])
        spans.append(span)
    return spans


def service_transitions(timeline: dict[str, Any]) -> list[dict]:
    """A deploy task's RayService timeline (``service_waiting.ServiceTimeline`` as recorded in its XCom,
    or one made from the cluster's objects while it waits) as transitions ``build_spans`` draws: queued
    from the deploy, admitted (the cluster starting and Serve deploying) at each admission, preempted and
    requeued at each preemption, and the phase the wait ended in.

    >>> [t["phase"] for t in service_transitions({"submitted_at": "2026-12-01T10:00:00Z",
    ...     "admissions": [{"at": "2026-12-01T10:00:30Z"}], "serving_at": "2026-12-01T10:01:00Z",
    ...     "final_phase": "SERVING"})]
    ['QUEUED', 'ADMITTED', 'SERVING']
    """
    moments: list[dict] = []
    if timeline.get("submitted_at"):
        moments.append({"at": to_epoch(timeline["submitted_at"]), "phase": Phase.QUEUED.value})
    for admission in timeline.get("admissions") or ():
        if admission.get("at"):
            moments.append({"at": to_epoch(admission["at"]), "phase": Phase.ADMITTED.value})
    for preemption in timeline.get("preemptions") or ():
        if not preemption.get("at"):
            continue
        at = to_epoch(preemption["at"])
        words = {
            "reason": preemption.get("reason") or EVICTED_BY_PREEMPTION,
            "message": preemption.get("message") or "",
        }
        moments.append({"at": at, "phase": Phase.PREEMPTED.value, **words})
        moments.append({"at": at, "phase": Phase.QUEUED.value})
    end = timeline.get("serving_at") or timeline.get("finished_at")
    if end and timeline.get("final_phase"):
        moments.append({"at": to_epoch(end), "phase": timeline["final_phase"]})
    moments.sort(key=lambda m: m["at"])  # stable: a preemption's requeue stays after it
    return [{"reason": "", "message": "", **m} for m in moments]


def service_spans(timeline: dict[str, Any], now: float) -> list[dict]:
    """``build_spans`` of ``service_transitions``, in a RayService's span kinds."""
    if not timeline:
        return []
    return build_spans({"transitions": service_transitions(timeline)}, now, SERVICE_PHASE_SPAN_KINDS)
