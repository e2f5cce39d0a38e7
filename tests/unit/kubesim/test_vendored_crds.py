"""The vendored CRDs are the upstream files, unmodified, and kubesim serves them by default."""

import hashlib

from kubesim.resources import CRDS_DIR, Registry


def test_every_vendored_crd_matches_its_recorded_checksum():
    recorded = dict(
        reversed(line.split()) for line in (CRDS_DIR / "SHA256SUMS").read_text().splitlines() if line.strip()
    )
    on_disk = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in CRDS_DIR.glob("*.yaml")}
    assert on_disk == recorded


def test_kubesim_serves_the_vendored_schemas_without_being_told_where_they_are():
    registry = Registry()
    for key in ("rayjobs.ray.io", "rayclusters.ray.io", "rayservices.ray.io", "workloads.kueue.x-k8s.io"):
        assert registry.get(key).schema is not None, key
        assert registry.get(key).printer_columns, key


def test_admission_checks_and_multikueue_kinds_are_served_with_their_vendored_schemas():
    registry = Registry()
    for key in (
        "admissionchecks.kueue.x-k8s.io",
        "multikueueconfigs.kueue.x-k8s.io",
        "multikueueclusters.kueue.x-k8s.io",
    ):
        assert registry.get(key).schema is not None, key
    assert registry.get("multikueueclusters.kueue.x-k8s.io").printer_columns[0]["name"] == "Connected"
    assert registry.get("multikueueclusters.kueue.x-k8s.io").subresources == {"status"}
