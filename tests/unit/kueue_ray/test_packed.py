"""A watch cache's packed objects (``kueue_ray.kube.packed``): what a large namespace costs a triggerer."""

from __future__ import annotations

import json
import random
import uuid

from kueue_ray.kube.essential import essential_rayjob
from kueue_ray.kube.packed import PackedObjects


def submitted(i: int) -> dict:
    """A RayJob as the operator submits it (its Airflow identity) and the hub caches it."""
    run_id = f"scheduled__2026-12-{1 + i % 28:02d}T00:00:00+00:00"
    return essential_rayjob(
        {
            "metadata": {
                "name": f"llm-train-{i:05d}-a1b2c3d4e5",
                "namespace": "ml",
                "uid": str(uuid.UUID(int=random.Random(i).getrandbits(128), version=4)),
                "resourceVersion": str(1000 + i),
                "labels": {
                    "app.kubernetes.io/managed-by": "airflow-kueue-ray",
                    "kueue.x-k8s.io/queue-name": "team-a",
                    "kueue.x-k8s.io/priority-class": "dev-priority",
                    "airflow.apache.org/dag-id": "llm_pipeline",
                    "airflow.apache.org/task-id": "train",
                },
                "annotations": {"airflow.apache.org/run-id": run_id, "airflow.apache.org/try-number": "1"},
            },
            "spec": {"suspend": True},
            "status": {"jobDeploymentStatus": "Suspended", "jobStatus": ""},
        }
    )


def test_objects_alike_cost_a_fraction_of_their_json_and_read_back_whole():
    """The objects of one watch share most of their text (the operator's labels, the queue, Kueue's
    messages): each is kept deflated against the first, little more than its own names and uids."""
    packed = PackedObjects()
    objects = {f"job-{i}": submitted(i) for i in range(1000)}
    for key, obj in objects.items():
        packed[key] = obj

    as_json = sum(len(json.dumps(obj, separators=(",", ":"))) for obj in objects.values())
    assert sum(len(b) for b in packed._objects.values()) < as_json / 4
    assert dict(packed) == objects
    assert list(packed) == list(objects)


def test_a_read_is_a_copy_and_a_replaced_or_deleted_object_reads_as_such():
    packed = PackedObjects()
    packed["a"], packed["b"] = submitted(1), submitted(2)

    copy = packed["a"]
    copy["status"]["jobDeploymentStatus"] = "Running"
    assert packed["a"]["status"]["jobDeploymentStatus"] == "Suspended"

    running = {**submitted(1), "status": {"jobDeploymentStatus": "Running"}}
    packed["a"] = running
    assert packed["a"] == running and packed["b"] == submitted(2)
    del packed["a"]
    assert "a" not in packed and len(packed) == 1 and packed.get("a") is None


def test_threads_packing_their_first_values_at_once_read_each_back():
    """A process's waits may step in several threads (a worker's waits): the one dictionary is chosen once."""
    from concurrent.futures import ThreadPoolExecutor

    from kueue_ray.kube.packed import Packer

    for _ in range(20):
        packer = Packer()
        with ThreadPoolExecutor(8) as pool:
            packed = list(pool.map(packer.pack, [submitted(i) for i in range(8)]))
        assert [packer.unpack(p) for p in packed] == [submitted(i) for i in range(8)]
