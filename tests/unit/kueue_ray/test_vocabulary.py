"""What a Kueue Workload says is spelled in one module, and every phase has its words and its span kind.

``kueue_ray.workload`` is the one place that names a Workload's condition types; every other module reads
Workloads through it, so adding a condition means changing that module and the status models that act on
it, and a module that spells a condition type on its own fails here instead of drifting silently."""

import ast
from pathlib import Path

import pytest
from kueue_ray.phases import (
    PHASE_SPAN_KINDS,
    PHASE_WORDS,
    SERVICE_PHASE_SPAN_KINDS,
    SERVICE_PHASE_WORDS,
    Phase,
    ServicePhase,
)
from kueue_ray.workload import CONDITION_TYPES

PACKAGE = Path(__file__).resolve().parents[3] / "plugins" / "kueue_ray"
VOCABULARY = PACKAGE / "workload.py"


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
        if isinstance(node, ast.ClassDef | ast.Module):  # attribute docstrings: a string after an assignment
            for before, after in zip(node.body, node.body[1:], strict=False):
                assigned = isinstance(before, ast.Assign | ast.AnnAssign)
                if assigned and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                    found.add(id(after.value))
    return found


def _prose(tree: ast.AST) -> set[int]:
    """Strings written for people, not matched against a Workload: docstrings, the literal parts of
    f-strings, and the values of word tables (a dict value whose key is not ``"type"``)."""
    found = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            found.update(id(v) for v in node.values if isinstance(v, ast.Constant))
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if not (isinstance(key, ast.Constant) and key.value == "type"):
                    found.add(id(value))
    return found


def condition_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string constant in ``source`` that spells a Kueue Workload condition type."""
    tree = ast.parse(source)
    prose = _prose(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in CONDITION_TYPES and id(node) not in prose
    ]


def test_only_the_workload_module_spells_a_condition_type() -> None:
    spelled = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != VOCABULARY and (found := condition_literals(path.read_text()))
    }
    assert spelled == {}, f"read Workload conditions through kueue_ray.workload: {spelled}"


@pytest.mark.parametrize(
    "source",
    [
        'ready = conditions.get("Admitted")',
        'finished = c.get("type") == "Finished"',
        'quota = condition(workload, "QuotaReserved")',
        'body = {"status": {"conditions": [{"type": "Evicted", "status": "True"}]}}',
        'reason = said.get("reason") or "Preempted"',
        "line = f\"PREEMPTED ({said.get('reason') or 'Preempted'})\"",
    ],
)
def test_the_scan_finds_a_condition_type_spelled_out(source: str) -> None:
    assert condition_literals(source)


@pytest.mark.parametrize(
    "source",
    [
        '"""Admitted"""',
        'LABELS = {"finished": "Finished"}',
        'ready = c.get("type") == "Ready"',  # a RayService's Ready is KubeRay's condition, not Kueue's
        'line = f"Finished{suffix}"',
    ],
)
def test_the_scan_leaves_prose_and_kuberay_conditions_alone(source: str) -> None:
    assert condition_literals(source) == []


@pytest.mark.parametrize(
    ("enum", "words", "kinds"),
    [(Phase, PHASE_WORDS, PHASE_SPAN_KINDS), (ServicePhase, SERVICE_PHASE_WORDS, SERVICE_PHASE_SPAN_KINDS)],
)
def test_every_phase_has_words_and_a_span_kind(enum, words, kinds) -> None:
    assert set(words) == set(enum), "every phase needs its words for the Kueue tab"
    assert set(kinds) == set(enum), "every phase needs the kind of span the timeline draws for it"
    assert all(words.values()) and all(kinds.values())
