"""kubesim.schema against the real KubeRay v1.7.0 and Kueue v0.19.2 CRDs: what the API server would accept,
reject (with which field path and wording) and default."""

from __future__ import annotations

import copy

import pytest
import yaml

from kubesim.resources import CRDS_DIR
from kubesim.schema import FieldError, apply_defaults, crd_schema, load_crd_schemas, validate
from tests.scenarios import all_scenarios

QUANTITY = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
HEAD_CONTAINER = "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0]"


@pytest.fixture(scope="module")
def schemas() -> dict:
    return load_crd_schemas(CRDS_DIR)


@pytest.fixture(scope="module")
def rayjob_schema(schemas) -> dict:
    return schemas[("ray.io", "rayjobs")]


def kueue(schemas, plural: str) -> dict:
    return schemas[("kueue.x-k8s.io", plural)]


def container(name: str, cpu="1") -> dict:
    return {
        "name": name,
        "image": "rayproject/ray:2.46.0",
        "ports": [{"containerPort": 8265, "name": "dashboard"}],
        "resources": {"requests": {"cpu": cpu, "memory": "2Gi"}, "limits": {"cpu": cpu, "memory": "2Gi"}},
    }


def rayjob() -> dict:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "train", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
        "spec": {
            "entrypoint": "python train.py",
            "shutdownAfterJobFinishes": True,
            "suspend": True,
            "rayClusterSpec": {
                "rayVersion": "2.46.0",
                "headGroupSpec": {
                    "rayStartParams": {"dashboard-host": "0.0.0.0"},
                    "template": {"spec": {"containers": [container("ray-head")]}},
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "workers",
                        "replicas": 2,
                        "rayStartParams": {},
                        "template": {"spec": {"containers": [container("ray-worker", cpu=2)]}},
                    }
                ],
            },
        },
    }


def defaulted(obj: dict, schema: dict) -> dict:
    apply_defaults(obj, schema)
    return obj


# ------------------------------------------------------------------------------------------ RayJob


def test_valid_rayjob_passes_and_gets_crd_defaults(rayjob_schema):
    job = defaulted(rayjob(), rayjob_schema)

    assert validate(job, rayjob_schema) == []
    assert job["spec"]["submissionMode"] == "K8sJobMode"
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["ttlSecondsAfterFinished"] == 0
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert (worker["minReplicas"], worker["maxReplicas"], worker["numOfHosts"]) == (0, 2147483647, 1)
    port = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"][0]
    assert port["protocol"] == "TCP"


def test_defaults_never_overwrite_given_values_or_create_missing_parents(rayjob_schema):
    job = rayjob()
    job["spec"]["submissionMode"] = "HTTPMode"

    apply_defaults(job, rayjob_schema)

    assert job["spec"]["submissionMode"] == "HTTPMode"
    assert "deletionStrategy" not in job["spec"]
    assert "status" not in job


def test_worker_group_without_defaults_misses_its_required_replica_bounds(rayjob_schema):
    errors = validate(rayjob(), rayjob_schema)

    assert errors == [
        FieldError(
            "spec.rayClusterSpec.workerGroupSpecs[0].maxReplicas", "FieldValueRequired", "Required value"
        ),
        FieldError(
            "spec.rayClusterSpec.workerGroupSpecs[0].minReplicas", "FieldValueRequired", "Required value"
        ),
    ]


def test_unknown_fields_are_rejected_with_their_full_path(rayjob_schema):
    job = defaulted(rayjob(), rayjob_schema)
    job["spec"]["foo"] = 1
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["imag"] = "x"
    job["spek"] = {}

    assert validate(job, rayjob_schema) == [
        FieldError(f"{HEAD_CONTAINER}.imag", "FieldValueInvalid", f'unknown field "{HEAD_CONTAINER}.imag"'),
        FieldError("spec.foo", "FieldValueInvalid", 'unknown field "spec.foo"'),
        FieldError("spek", "FieldValueInvalid", 'unknown field "spek"'),
    ]


def test_wrong_type_names_field_and_both_types(rayjob_schema):
    job = defaulted(rayjob(), rayjob_schema)
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "two"
    job["spec"]["suspend"] = "yes"

    assert validate(job, rayjob_schema) == [
        FieldError(
            "spec.suspend",
            "FieldValueTypeInvalid",
            'Invalid value: "string": spec.suspend in body must be of type boolean: "string"',
        ),
        FieldError(
            "spec.rayClusterSpec.workerGroupSpecs[0].replicas",
            "FieldValueTypeInvalid",
            'Invalid value: "string": spec.rayClusterSpec.workerGroupSpecs[0].replicas in body '
            'must be of type integer: "string"',
        ),
    ]


def test_integer_field_takes_integral_json_floats_only(rayjob_schema):
    job = defaulted(rayjob(), rayjob_schema)
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    worker["replicas"] = 2.0
    assert validate(job, rayjob_schema) == []

    worker["replicas"] = 2.5
    assert [e.message for e in validate(job, rayjob_schema)] == [
        'Invalid value: "number": spec.rayClusterSpec.workerGroupSpecs[0].replicas in body '
        'must be of type integer: "number"'
    ]


def test_bad_enum_lists_the_supported_values(rayjob_schema):
    job = defaulted(rayjob(), rayjob_schema)
    job["spec"]["deletionStrategy"] = {"onSuccess": {"policy": "Foo"}, "onFailure": {"policy": "DeleteNone"}}

    assert validate(job, rayjob_schema) == [
        FieldError(
            "spec.deletionStrategy.onSuccess.policy",
            "FieldValueNotSupported",
            'Unsupported value: "Foo": supported values: "DeleteCluster", "DeleteWorkers", "DeleteSelf", "DeleteNone"',
        )
    ]


def test_submission_mode_has_no_enum_in_the_crd(rayjob_schema):
    """KubeRay's controller, not the API server, rejects an unknown submissionMode."""
    job = defaulted(rayjob(), rayjob_schema)
    job["spec"]["submissionMode"] = "Foo"

    assert validate(job, rayjob_schema) == []


def test_missing_container_name_is_required(rayjob_schema):
    job = defaulted(rayjob(), rayjob_schema)
    del job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["name"]

    assert validate(job, rayjob_schema) == [
        FieldError(f"{HEAD_CONTAINER}.name", "FieldValueRequired", "Required value")
    ]


def test_missing_head_group_is_required(rayjob_schema):
    job = defaulted(rayjob(), rayjob_schema)
    del job["spec"]["rayClusterSpec"]["headGroupSpec"]

    assert validate(job, rayjob_schema) == [
        FieldError("spec.rayClusterSpec.headGroupSpec", "FieldValueRequired", "Required value")
    ]


def test_duplicate_container_names_clash_in_the_list_map(rayjob_schema):
    job = defaulted(rayjob(), rayjob_schema)
    containers = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"]
    containers.append(copy.deepcopy(containers[0]))

    assert validate(job, rayjob_schema) == [
        FieldError(
            "spec.rayClusterSpec.headGroupSpec.template.spec.containers[1]",
            "FieldValueDuplicate",
            'Duplicate value: {"name":"ray-head"}',
        )
    ]


def test_minimum_is_enforced(rayjob_schema):
    job = defaulted(rayjob(), rayjob_schema)
    job["spec"]["preRunningDeadlineSeconds"] = 0

    assert validate(job, rayjob_schema) == [
        FieldError(
            "spec.preRunningDeadlineSeconds",
            "FieldValueInvalid",
            "Invalid value: 0: spec.preRunningDeadlineSeconds in body should be greater than or equal to 1",
        )
    ]


def test_container_resources_are_int_or_string_quantities(rayjob_schema):
    job = defaulted(rayjob(), rayjob_schema)
    resources = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0][
        "resources"
    ]
    resources["requests"] = {"cpu": 1, "memory": "512Mi", "nvidia.com/gpu": "1"}
    assert validate(job, rayjob_schema) == []

    resources["requests"] = {"cpu": "one", "memory": True}
    assert validate(job, rayjob_schema) == [
        FieldError(
            f"{HEAD_CONTAINER}.resources.requests.cpu",
            "FieldValueInvalid",
            f"Invalid value: \"one\": {HEAD_CONTAINER}.resources.requests.cpu in body should match '{QUANTITY}'",
        ),
        FieldError(
            f"{HEAD_CONTAINER}.resources.requests.memory",
            "FieldValueTypeInvalid",
            f'Invalid value: "boolean": {HEAD_CONTAINER}.resources.requests.memory in body '
            'must be of type integer,string: "boolean"',
        ),
    ]


def test_root_metadata_is_only_checked_to_be_an_object(rayjob_schema):
    job = defaulted(rayjob(), rayjob_schema)
    job["metadata"]["anything"] = {"the": "store validates metadata"}
    assert validate(job, rayjob_schema) == []

    job["metadata"] = "train"
    assert validate(job, rayjob_schema) == [
        FieldError(
            "metadata",
            "FieldValueTypeInvalid",
            'Invalid value: "string": metadata in body must be of type object: "string"',
        )
    ]


def test_null_fields_are_pruned_or_defaulted_before_validation(rayjob_schema):
    job = rayjob()
    job["spec"]["submissionMode"] = None
    job["spec"]["entrypoint"] = None

    apply_defaults(job, rayjob_schema)

    assert job["spec"]["submissionMode"] == "K8sJobMode"
    assert "entrypoint" not in job["spec"]
    assert validate(job, rayjob_schema) == []


def test_null_without_defaulting_is_a_type_error(rayjob_schema):
    job = defaulted(rayjob(), rayjob_schema)
    job["spec"]["entrypoint"] = None

    assert [e.message for e in validate(job, rayjob_schema)] == [
        'Invalid value: "null": spec.entrypoint in body must be of type string: "null"'
    ]


# ------------------------------------------------------------------------------------------- Kueue

CLUSTER_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ClusterQueue",
    "metadata": {"name": "team-a"},
    "spec": {
        "namespaceSelector": {},
        "cohortName": "ml",
        "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "on-demand",
                        "resources": [
                            {"name": "cpu", "nominalQuota": 8, "borrowingLimit": "4"},
                            {"name": "memory", "nominalQuota": "32Gi"},
                            {"name": "nvidia.com/gpu", "nominalQuota": "0"},
                        ],
                    }
                ],
            }
        ],
    },
}

KUEUE_OBJECTS = {
    "clusterqueues": CLUSTER_QUEUE,
    "localqueues": {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "team-a", "namespace": "ml"},
        "spec": {"clusterQueue": "team-a"},
    },
    "workloadpriorityclasses": {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
        "description": "production training",
    },
    "resourceflavors": {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "on-demand"},
        "spec": {"nodeLabels": {"instance-type": "on-demand"}},
    },
    "cohorts": {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Cohort",
        "metadata": {"name": "ml"},
        "spec": {},
    },
    "workloads": {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "rayjob-train-1a2b3", "namespace": "ml"},
        "spec": {
            "queueName": "team-a",
            "priority": 1000,
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
            "podSets": [
                {"name": "head", "count": 1, "template": {"spec": {"containers": [container("ray-head")]}}},
                {
                    "name": "workers",
                    "count": 2,
                    "template": {"spec": {"containers": [container("ray-worker")]}},
                },
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "QuotaReserved",
                    "message": "Quota reserved in ClusterQueue team-a",
                    "lastTransitionTime": "2026-01-02T03:04:05Z",
                }
            ]
        },
    },
}


@pytest.mark.parametrize("plural", sorted(KUEUE_OBJECTS))
def test_valid_kueue_v1beta2_objects_pass(schemas, plural):
    schema = kueue(schemas, plural)
    obj = defaulted(copy.deepcopy(KUEUE_OBJECTS[plural]), schema)

    assert validate(obj, schema) == []


PLURALS = {
    "ClusterQueue": "clusterqueues",
    "Cohort": "cohorts",
    "LocalQueue": "localqueues",
    "ResourceFlavor": "resourceflavors",
    "WorkloadPriorityClass": "workloadpriorityclasses",
}


def scenario_objects() -> list:
    found = []
    for scenario in all_scenarios():
        for index, obj in enumerate(scenario.kueue):
            found.append(pytest.param(obj, id=f"{scenario.name}-{index}-{obj['kind']}"))
    return found


@pytest.mark.parametrize("obj", scenario_objects())
def test_objects_of_the_admission_scenarios_pass(schemas, obj):
    group = obj["apiVersion"].split("/")[0]
    schema = schemas[(group, PLURALS[obj["kind"]])]

    assert validate(defaulted(copy.deepcopy(obj), schema), schema) == []


def test_cluster_queue_gets_nested_defaults_from_defaulted_parents(schemas):
    schema = kueue(schemas, "clusterqueues")
    cq = copy.deepcopy(CLUSTER_QUEUE)
    del cq["spec"]["preemption"]

    apply_defaults(cq, schema)

    assert cq["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert cq["spec"]["stopPolicy"] == "None"
    assert cq["spec"]["preemption"] == {
        "withinClusterQueue": "Never",
        "reclaimWithinCohort": "Never",
        "borrowWithinCohort": {"policy": "Never"},
    }
    assert cq["spec"]["flavorFungibility"] == {
        "whenCanBorrow": "MayStopSearch",
        "whenCanPreempt": "TryNextFlavor",
    }


def test_nominal_quota_must_be_a_quantity(schemas):
    schema = kueue(schemas, "clusterqueues")
    cq = defaulted(copy.deepcopy(CLUSTER_QUEUE), schema)
    quota = "spec.resourceGroups[0].flavors[0].resources[1].nominalQuota"
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = "2x"

    assert validate(cq, schema) == [
        FieldError(
            quota, "FieldValueInvalid", f"Invalid value: \"2x\": {quota} in body should match '{QUANTITY}'"
        )
    ]


@pytest.mark.parametrize("quota", [2, "2", "500m", "1.5", "4Gi", "1e3"])
def test_nominal_quota_accepts_integers_and_quantity_strings(schemas, quota):
    schema = kueue(schemas, "clusterqueues")
    cq = defaulted(copy.deepcopy(CLUSTER_QUEUE), schema)
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = quota

    assert validate(cq, schema) == []


@pytest.mark.parametrize("quota", ["2x", "2\n", "", "Gi", " 2"])
def test_nominal_quota_rejects_what_is_not_a_quantity(schemas, quota):
    schema = kueue(schemas, "clusterqueues")
    cq = defaulted(copy.deepcopy(CLUSTER_QUEUE), schema)
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = quota

    assert [e.field for e in validate(cq, schema)] == [
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    ]


def test_cluster_queue_enum_length_and_item_count_rules(schemas):
    schema = kueue(schemas, "clusterqueues")
    cq = defaulted(copy.deepcopy(CLUSTER_QUEUE), schema)
    cq["spec"]["queueingStrategy"] = "FIFO"
    cq["spec"]["cohortName"] = "c" * 254
    cq["spec"]["resourceGroups"][0]["coveredResources"] = []
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] = []

    assert validate(cq, schema) == [
        FieldError("spec.cohortName", "FieldValueTooLong", "Too long: may not be more than 253 bytes"),
        FieldError(
            "spec.resourceGroups[0].coveredResources",
            "FieldValueInvalid",
            "Invalid value: 0: spec.resourceGroups[0].coveredResources in body should have at least 1 items",
        ),
        FieldError(
            "spec.resourceGroups[0].flavors[0].resources",
            "FieldValueInvalid",
            "Invalid value: 0: spec.resourceGroups[0].flavors[0].resources in body should have at least 1 items",
        ),
        FieldError(
            "spec.queueingStrategy",
            "FieldValueNotSupported",
            'Unsupported value: "FIFO": supported values: "StrictFIFO", "BestEffortFIFO"',
        ),
    ]


def test_resource_flavor_node_labels_are_capped(schemas):
    schema = kueue(schemas, "resourceflavors")
    flavor = copy.deepcopy(KUEUE_OBJECTS["resourceflavors"])
    flavor["spec"]["nodeLabels"] = {f"label-{i}": "x" for i in range(9)}

    assert validate(flavor, schema) == [
        FieldError("spec.nodeLabels", "FieldValueTooMany", "Too many: 9: must have at most 8 items")
    ]


def test_workload_needs_a_template_per_pod_set_and_unique_names(schemas):
    schema = kueue(schemas, "workloads")
    workload = defaulted(copy.deepcopy(KUEUE_OBJECTS["workloads"]), schema)
    del workload["spec"]["podSets"][0]["template"]
    workload["spec"]["podSets"][1]["name"] = "head"

    assert validate(workload, schema) == [
        FieldError("spec.podSets[0].template", "FieldValueRequired", "Required value"),
        FieldError("spec.podSets[1]", "FieldValueDuplicate", 'Duplicate value: {"name":"head"}'),
    ]


def test_workload_pod_set_name_and_count_default(schemas):
    schema = kueue(schemas, "workloads")
    workload = copy.deepcopy(KUEUE_OBJECTS["workloads"])
    del workload["spec"]["podSets"][1]
    del workload["spec"]["podSets"][0]["name"]
    del workload["spec"]["podSets"][0]["count"]

    apply_defaults(workload, schema)

    assert (workload["spec"]["podSets"][0]["name"], workload["spec"]["podSets"][0]["count"]) == ("main", 1)


def test_condition_timestamps_must_be_rfc3339(schemas):
    schema = kueue(schemas, "workloads")
    workload = defaulted(copy.deepcopy(KUEUE_OBJECTS["workloads"]), schema)
    workload["status"]["conditions"][0]["lastTransitionTime"] = "2026-01-02 03:04:05"
    field = "status.conditions[0].lastTransitionTime"

    assert validate(workload, schema) == [
        FieldError(
            field,
            "FieldValueTypeInvalid",
            f'Invalid value: "2026-01-02 03:04:05": {field} in body must be of type date-time: "2026-01-02 03:04:05"',
        )
    ]


def test_condition_status_and_reason_rules(schemas):
    schema = kueue(schemas, "workloads")
    workload = defaulted(copy.deepcopy(KUEUE_OBJECTS["workloads"]), schema)
    workload["status"]["conditions"][0].update(status="Yes", reason="")

    assert [(e.field, e.reason) for e in validate(workload, schema)] == [
        ("status.conditions[0].status", "FieldValueNotSupported"),
        ("status.conditions[0].reason", "FieldValueInvalid"),
    ]


# --------------------------------------------------------------------- schema features not in these CRDs


def test_preserve_unknown_fields_keeps_checking_declared_properties():
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"replicas": {"type": "integer", "default": 1}},
            }
        },
    }
    obj = {"spec": {"anything": {"goes": [1, "two"]}}}

    apply_defaults(obj, schema)
    assert obj["spec"] == {"anything": {"goes": [1, "two"]}, "replicas": 1}
    assert validate(obj, schema) == []

    obj["spec"]["replicas"] = "one"
    assert [e.field for e in validate(obj, schema)] == ["spec.replicas"]


def test_embedded_resource_allows_and_requires_type_meta():
    schema = {
        "type": "object",
        "properties": {
            "template": {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        },
    }
    assert (
        validate(
            {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}}, schema
        )
        == []
    )
    assert validate({"template": {"metadata": {}}}, schema) == [
        FieldError("template.apiVersion", "FieldValueRequired", "Required value: must not be empty"),
        FieldError("template.kind", "FieldValueRequired", "Required value: must not be empty"),
    ]


def test_nullable_exclusive_bounds_and_sets():
    schema = {
        "type": "object",
        "properties": {
            "note": {"type": "string", "nullable": True},
            "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1},
            "tags": {
                "type": "array",
                "items": {"type": "string"},
                "x-kubernetes-list-type": "set",
                "maxItems": 3,
            },
        },
    }
    assert validate({"note": None, "ratio": 0.5, "tags": ["a", "b"]}, schema) == []
    assert validate({"ratio": 0, "tags": ["a", "b", "a", "c"]}, schema) == [
        FieldError("ratio", "FieldValueInvalid", "Invalid value: 0: ratio in body should be greater than 0"),
        FieldError("tags", "FieldValueTooMany", "Too many: 4: must have at most 3 items"),
        FieldError("tags[2]", "FieldValueDuplicate", 'Duplicate value: "a"'),
    ]
    assert [e.message for e in validate({"ratio": 1.5}, schema)] == [
        "Invalid value: 1.5: ratio in body should be less than or equal to 1"
    ]


# ------------------------------------------------------------------------------------------ loading


def test_loaded_schemas_are_the_served_storage_versions(schemas):
    assert set(schemas) >= {
        ("ray.io", "rayjobs"),
        ("ray.io", "rayclusters"),
        ("ray.io", "rayservices"),
        ("kueue.x-k8s.io", "workloads"),
        ("kueue.x-k8s.io", "clusterqueues"),
        ("kueue.x-k8s.io", "localqueues"),
        ("kueue.x-k8s.io", "resourceflavors"),
        ("kueue.x-k8s.io", "workloadpriorityclasses"),
    }
    # v1beta2 Workloads name their priority class by reference; v1beta1 had priorityClassName.
    workload_spec = kueue(schemas, "workloads")["properties"]["spec"]["properties"]
    assert "priorityClassRef" in workload_spec and "priorityClassName" not in workload_spec
    # v1 RayJobs have submissionMode; v1alpha1 does not.
    assert "submissionMode" in schemas[("ray.io", "rayjobs")]["properties"]["spec"]["properties"]


def test_crd_schema_picks_the_named_version():
    crd = yaml.safe_load((CRDS_DIR / "kueue.x-k8s.io_workloadpriorityclasses.yaml").read_text())

    assert "value" in crd_schema(crd, "v1beta1")["properties"]
    with pytest.raises(KeyError, match="v9"):
        crd_schema(crd, "v9")
