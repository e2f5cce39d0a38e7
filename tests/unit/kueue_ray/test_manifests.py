"""Building, validating and sizing RayJob bodies (and the quantity arithmetic underneath)."""

import copy
from decimal import Decimal

import pytest
import yaml
from kueue_ray.errors import ManifestError
from kueue_ray.manifests import (
    TEMPLATES_DIR,
    build_rayjob,
    build_rayservice,
    cluster_config_digest,
    explain_capacity_shortfall,
    pod_sets,
    total_request,
    validate_rayjob,
)
from kueue_ray.naming import (
    CLUSTER_CONFIG_ANNOTATION,
    DEPLOYMENT_LABEL,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    TASK_INSTANCE_LABEL,
    TRY_NUMBER_ANNOTATION,
    AirflowIdentity,
    rayjob_name,
)
from kueue_ray.quantity import QuantityError, format_quantity, parse_quantity

IDENTITY = AirflowIdentity("ml_pipeline", "train", "manual__2026-12-01T10:00:00+00:00", -1, 1)
NAME = IDENTITY.rayjob_name()


def build(template="text-classifier", **kwargs):
    args = {"name": NAME, "namespace": "default", "queue": "user-queue", "priority": "dev-priority"}
    args.update(kwargs)
    args.setdefault("identity", IDENTITY)
    return build_rayjob(template, **args)


def head_container(body):
    return body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]


def worker_groups(body):
    return body["spec"]["rayClusterSpec"]["workerGroupSpecs"]


# ------------------------------------------------------------------------------------------- quantities


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("1.5", Decimal("1.5")),
        ("8G", Decimal(8 * 10**9)),
        ("200Mi", Decimal(200 * 2**20)),
        ("1e3", Decimal(1000)),
        ("2E", Decimal(2 * 10**18)),
        (4, Decimal(4)),
    ],
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["2x", "", "1.2.3", "Gi", True, None])
def test_parse_quantity_rejects_garbage(bad):
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_format_quantity_is_kubernetes_canonical():
    assert format_quantity(Decimal("2.5")) == "2500m"
    assert format_quantity(Decimal(8 * 10**9)) == "8G"
    assert format_quantity(Decimal(200 * 2**20)) == "200Mi"
    assert format_quantity(Decimal(0)) == "0"
    assert format_quantity(Decimal("0.0000000001")) == "1n"


# ---------------------------------------------------------------------------------------------- building


def required_values(path) -> dict:
    """The values a shipped template cannot render without (each documents its own)."""
    return {"model_path": "/mnt/models/x"} if "model_path" in path.read_text() else {}


def test_every_template_builds():
    for path in sorted(TEMPLATES_DIR.glob("*.yaml.j2")):
        values = required_values(path)
        builder = build_rayservice if "serve" in path.name else build_rayjob
        built = builder(
            path,
            name=NAME,
            namespace="ml",
            queue="team-a",
            priority="prod-priority",
            identity=IDENTITY,
            values=values,
        )
        assert built.body["metadata"]["labels"][QUEUE_LABEL] == "team-a", path.name
        assert built.total_request, path.name


def test_a_rayservice_has_no_entrypoint_to_set():
    with pytest.raises(ManifestError) as error:
        build_rayservice(
            "aurora-serve",
            name="serve",
            namespace="ml",
            queue="team-a",
            priority="prod-priority",
            identity=IDENTITY,
            values={"model_path": "/mnt/models/x"},
            entrypoint="python serve.py",
        )
    assert error.value.field == "entrypoint" and "only a RayJob" in str(error.value)


def test_kueue_and_identity_metadata_is_always_set():
    body = build(annotations={"team": "nlp"}).body
    labels, annotations = body["metadata"]["labels"], body["metadata"]["annotations"]
    assert labels[QUEUE_LABEL] == "user-queue"
    assert labels[PRIORITY_CLASS_LABEL] == "dev-priority"
    assert labels["app.kubernetes.io/managed-by"] == "airflow-kueue-ray"
    assert labels["airflow.apache.org/dag-id"] == "ml_pipeline"
    assert annotations["airflow.apache.org/run-id"] == IDENTITY.run_id
    assert annotations["team"] == "nlp"
    assert body["spec"]["suspend"] is True
    assert body["spec"]["shutdownAfterJobFinishes"] is True
    assert (body["metadata"]["name"], body["metadata"]["namespace"]) == (NAME, "default")


def test_user_annotations_cannot_forge_ownership():
    body = build(annotations={TRY_NUMBER_ANNOTATION: "99"}).body
    assert body["metadata"]["annotations"][TRY_NUMBER_ANNOTATION] == "1"


def test_each_try_builds_its_own_rayjob_carrying_the_deployment():
    first = AirflowIdentity(IDENTITY.dag_id, IDENTITY.task_id, IDENTITY.run_id, -1, 1, deployment="prod")
    retry = AirflowIdentity(IDENTITY.dag_id, IDENTITY.task_id, IDENTITY.run_id, -1, 2, deployment="prod")
    one, two = (
        build(name=first.rayjob_name(), identity=first),
        build(name=retry.rayjob_name(), identity=retry),
    )
    assert one.name != two.name
    assert two.body["metadata"]["annotations"][TRY_NUMBER_ANNOTATION] == "2"
    for built in (one, two):
        metadata = built.body["metadata"]
        assert metadata["labels"][DEPLOYMENT_LABEL] == metadata["annotations"][DEPLOYMENT_LABEL] == "prod"
        # every try of the task instance is found with one label selector
        assert metadata["labels"][TASK_INSTANCE_LABEL] == first.task_instance_key()


def test_generated_names_for_long_ids_pass_validation():
    long_name = rayjob_name("d" * 120, "t" * 120, "manual__x", 12)
    assert build(name=long_name).name == long_name


INJECTION_TEMPLATE = """\
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: {{ name }}
spec:
  entrypoint: {{ command }}
  submissionMode: HTTPMode
  rayClusterSpec:
    headGroupSpec:
      template:
        spec:
          containers:
            - name: ray-head
              image: {{ image_value }}
              resources:
                requests: {cpu: {{ cpu }}}
"""


@pytest.mark.parametrize(
    "hostile",
    [
        "x\nkind: Pod",
        "python t.py\n  rayClusterSpec: null",
        '" }\nkind: Pod',
        "{{ 7 * 7 }}",
        "- a\n- b",
        "!!python/object/apply:os.system ['id']",
    ],
)
def test_user_values_can_never_change_the_yaml_structure(tmp_path, hostile):
    template = tmp_path / "inject.yaml.j2"
    template.write_text(INJECTION_TEMPLATE)
    body = build(
        template, values={"command": hostile, "image_value": "rayproject/ray:2.46.0", "cpu": "1"}
    ).body
    assert body["kind"] == "RayJob"
    assert body["spec"]["entrypoint"] == hostile
    assert head_container(body)["image"] == "rayproject/ray:2.46.0"


def test_template_values_land_in_the_runtime_env_as_strings():
    body = build("llm-train", values={"output_dir": "/mnt/x\nkind: Pod", "epochs": 3}).body
    runtime_env = yaml.safe_load(body["spec"]["runtimeEnvYAML"])
    assert runtime_env["env_vars"]["OUTPUT_DIR"] == "/mnt/x\nkind: Pod"
    assert runtime_env["env_vars"]["EPOCHS"] == "3"


def test_missing_template_variable_names_it():
    with pytest.raises(ManifestError) as err:
        build("batch-inference")
    assert err.value.field == "values"
    assert "model_path" in str(err.value)


def test_unknown_template_lists_the_available_ones():
    with pytest.raises(ManifestError) as err:
        build("no-such-template")
    assert "text-classifier.yaml.j2" in str(err.value)


def test_template_that_disables_shutdown_is_rejected(tmp_path):
    template = tmp_path / "keep.yaml.j2"
    template.write_text(INJECTION_TEMPLATE + "  shutdownAfterJobFinishes: false\n")
    with pytest.raises(ManifestError) as err:
        build(template, values={"command": "python x.py", "image_value": "img", "cpu": "1"})
    assert err.value.field == "spec.shutdownAfterJobFinishes"


def test_overrides_entrypoint_image_runtime_env():
    body = build(
        "llm-train",
        entrypoint="python other.py --lr 1e-4",
        image="registry.local/ray:custom",
        runtime_env={"pip": ["vllm"], "env_vars": {"EPOCHS": "5", "EXTRA": "1"}},
    ).body
    assert body["spec"]["entrypoint"] == "python other.py --lr 1e-4"
    assert head_container(body)["image"] == "registry.local/ray:custom"
    assert all(
        g["template"]["spec"]["containers"][0]["image"] == "registry.local/ray:custom"
        for g in worker_groups(body)
    )
    runtime_env = yaml.safe_load(body["spec"]["runtimeEnvYAML"])
    assert runtime_env["pip"] == ["vllm"]
    assert runtime_env["env_vars"]["EPOCHS"] == "5"
    assert runtime_env["env_vars"]["EXTRA"] == "1"
    assert runtime_env["env_vars"]["BASE_MODEL"] == "meta-llama/Llama-3.2-1B"


def test_worker_replicas_keep_min_and_max_consistent():
    body = build("llm-train", worker_replicas=4).body
    group = worker_groups(body)[0]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (4, 2, 4)
    body = build("llm-train", worker_replicas={"gpu-workers": 1}).body
    group = worker_groups(body)[0]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 2)
    with pytest.raises(ManifestError) as err:
        build("llm-train", worker_replicas={"cpu-workers": 1})
    assert "gpu-workers" in err.value.fix


def test_resources_override_sets_requests_and_limits():
    built = build("text-classifier", resources={"head": {"cpu": "1", "memory": "4G"}})
    resources = head_container(built.body)["resources"]
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == "1"
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == "4G"
    assert resources["requests"]["nvidia.com/gpu"] == "1"
    # head + the K8sJobMode submitter pod (500m / 200Mi) that Kueue also counts
    assert built.total_request == {"cpu": "1500m", "memory": "4111050Ki", "nvidia.com/gpu": "1"}
    with pytest.raises(ManifestError) as err:
        build("text-classifier", resources={"head": {"cpu": "lots"}})
    assert err.value.field == "resources.head.cpu"


def test_rayservice_gets_queue_labels_and_runtime_env():
    built = build_rayservice(
        "aurora-serve",
        name="aurora-serve-1",
        namespace="default",
        queue="user-queue",
        priority="prod-priority",
        identity=IDENTITY,
        values={"model_path": "/mnt/models/aurora"},
        runtime_env={"env_vars": {"LOG_LEVEL": "debug"}},
    )
    assert built.body["kind"] == "RayService"
    assert built.body["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "prod-priority"
    app = yaml.safe_load(built.body["spec"]["serveConfigV2"])["applications"][0]
    assert app["runtime_env"]["env_vars"] == {"LOG_LEVEL": "debug"}
    worker = built.body["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][
        0
    ]
    assert {"name": "MODEL_PATH", "value": "/mnt/models/aurora"} in worker["env"]
    assert built.total_request == {"cpu": "12", "memory": "80Gi", "nvidia.com/gpu": "1"}


def test_a_new_model_is_a_new_cluster_config_and_an_autoscalers_replicas_or_kueues_suspend_are_not():
    def config(model: str) -> dict:
        built = build_rayservice(
            "aurora-serve",
            name="aurora-serve-1",
            namespace="default",
            queue="user-queue",
            priority="prod-priority",
            identity=IDENTITY,
            values={"model_path": model},
        )
        digest = built.body["metadata"]["annotations"][CLUSTER_CONFIG_ANNOTATION]
        assert digest == cluster_config_digest(built.body["spec"]["rayClusterConfig"])
        return built.body["spec"]["rayClusterConfig"]

    assert cluster_config_digest(config("/m/v1")) != cluster_config_digest(config("/m/v2"))
    scaled = config("/m/v1")
    scaled["workerGroupSpecs"][0]["replicas"] = 3
    scaled["suspend"] = True
    assert cluster_config_digest(scaled) == cluster_config_digest(config("/m/v1"))


# -------------------------------------------------------------------------------------------- validation


def valid_body():
    return copy.deepcopy(build("llm-train").body)


def mutate(path, value):
    def apply(body):
        target = body
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return apply


CLUSTER = ("spec", "rayClusterSpec")
HEAD_CONTAINER = (*CLUSTER, "headGroupSpec", "template", "spec", "containers", 0)
WORKER = (*CLUSTER, "workerGroupSpecs", 0)
WORKER_CONTAINER = (*WORKER, "template", "spec", "containers", 0)


def many_groups(body):
    group = body["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    body["spec"]["rayClusterSpec"]["workerGroupSpecs"] = [
        {**copy.deepcopy(group), "groupName": f"g{i}"} for i in range(17)
    ]


@pytest.mark.parametrize(
    ("change", "field", "fix_word"),
    [
        (mutate(("metadata", "name"), "Train_Job"), "metadata.name", "rayjob_name"),
        (mutate(("metadata", "name"), "a" * 48), "metadata.name", "rayjob_name"),
        (mutate(("spec", "entrypoint"), KeyError), "spec.entrypoint", "entrypoint"),
        (mutate(("spec", "rayClusterSpec"), KeyError), "spec.rayClusterSpec", "rayClusterSpec"),
        (mutate(("spec", "clusterSelector"), {"ray.io/cluster": "shared"}), "spec.clusterSelector", "remove"),
        (mutate(("spec", "shutdownAfterJobFinishes"), False), "spec.shutdownAfterJobFinishes", "true"),
        (
            mutate((*CLUSTER, "enableInTreeAutoscaling"), True),
            "spec.rayClusterSpec.enableInTreeAutoscaling",
            "elastic-job",
        ),
        (
            mutate((*WORKER, "groupName"), "head"),
            "spec.rayClusterSpec.workerGroupSpecs[0].groupName",
            "rename",
        ),
        (many_groups, "spec.rayClusterSpec.workerGroupSpecs", "HTTPMode"),
        (
            mutate((*HEAD_CONTAINER, "image"), KeyError),
            "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].image",
            "image",
        ),
        (
            mutate((*HEAD_CONTAINER, "resources", "requests", "cpu"), "8 cores"),
            "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].resources.requests[cpu]",
            "500m",
        ),
        (mutate((*WORKER, "replicas"), -1), "spec.rayClusterSpec.workerGroupSpecs[0].replicas", ">= 0"),
        # The API server refuses such pods (422 "Limit must be set for non overcommitable resources"), but
        # only once KubeRay creates them: the RayJob itself would be accepted and admitted.
        (
            mutate((*WORKER_CONTAINER, "resources", "limits"), {"cpu": "16", "memory": "128Gi"}),
            "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "limits nvidia.com/gpu: 4",
        ),
        (
            mutate((*WORKER_CONTAINER, "resources", "limits", "nvidia.com/gpu"), "8"),
            "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources.requests[nvidia.com/gpu]",
            "same amount",
        ),
        (
            mutate(("metadata", "labels", QUEUE_LABEL), "user queue!"),
            f"metadata.labels[{QUEUE_LABEL}]",
            "LocalQueue",
        ),
        (
            mutate(("metadata", "labels", PRIORITY_CLASS_LABEL), ""),
            f"metadata.labels[{PRIORITY_CLASS_LABEL}]",
            "WorkloadPriorityClass",
        ),
        (mutate(("spec", "runtimeEnvYAML"), "- pip\n- torch\n"), "spec.runtimeEnvYAML", "mapping"),
        (mutate(("spec", "submissionMode"), "FastMode"), "spec.submissionMode", "HTTPMode"),
    ],
)
def test_validation_errors_name_field_value_and_fix(change, field, fix_word):
    body = valid_body()
    change(body)
    with pytest.raises(ManifestError) as err:
        validate_rayjob(body)
    assert err.value.field == field
    message = str(err.value)
    assert field in message
    assert "Fix:" in message and fix_word in message
    assert "got " in message


def test_interactive_mode_is_refused_before_anything_is_created():
    """KubeRay would wait for a spec.jobId nobody sets, and the RayJob could never be suspended."""
    body = valid_body()
    body["spec"]["submissionMode"] = "InteractiveMode"
    with pytest.raises(ManifestError) as err:
        validate_rayjob(body)
    assert err.value.field == "spec.submissionMode"
    message = str(err.value)
    assert "jobId" in message and "suspended" in message and "K8sJobMode" in message


def test_build_refuses_interactive_mode_from_template_values():
    with pytest.raises(ManifestError, match="InteractiveMode"):
        build(values={"submission_mode": "InteractiveMode"})


# ------------------------------------------------------------------------------------------ quota sizing


def head_only(mode=None, **container_resources):
    spec = {
        "entrypoint": "python x.py",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": {
            "headGroupSpec": {
                "template": {
                    "spec": {
                        "containers": [{"name": "ray-head", "image": "i", "resources": container_resources}]
                    }
                }
            }
        },
    }
    if mode:
        spec["submissionMode"] = mode
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "x"}, "spec": spec}


SEED_HEAD = {
    "limits": {"memory": "8G", "nvidia.com/gpu": "1"},
    "requests": {"cpu": "2", "memory": "8G", "nvidia.com/gpu": "1"},
}


def test_k8sjobmode_adds_the_submitter_pod_set():
    body = head_only(**SEED_HEAD)
    assert total_request(body) == {
        "cpu": "2500m",
        "memory": "8017300Ki",
        "nvidia.com/gpu": "1",
    }
    assert [s["name"] for s in pod_sets(body)] == ["head", "submitter"]
    assert pod_sets(body)[1]["requests"] == {"cpu": "500m", "memory": "200Mi"}


def test_httpmode_has_no_submitter():
    assert total_request(head_only("HTTPMode", **SEED_HEAD)) == {
        "cpu": "2",
        "memory": "8G",
        "nvidia.com/gpu": "1",
    }


def test_custom_submitter_template_requests_are_used():
    body = head_only(**SEED_HEAD)
    body["spec"]["submitterPodTemplate"] = {
        "spec": {
            "containers": [
                {"name": "s", "image": "i", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
            ]
        }
    }
    assert pod_sets(body)[-1] == {
        "name": "submitter",
        "count": 1,
        "requests": {"cpu": "100m", "memory": "64Mi"},
    }


def test_limits_stand_in_for_missing_requests():
    body = head_only("HTTPMode", limits={"cpu": "3", "memory": "1Gi"}, requests={"cpu": "1"})
    assert total_request(body) == {"cpu": "1", "memory": "1Gi"}


def test_workers_count_replicas_times_hosts_and_init_containers_take_the_max():
    body = head_only("HTTPMode", requests={"cpu": "1"})
    body["spec"]["rayClusterSpec"]["workerGroupSpecs"] = [
        {
            "groupName": "TPU-Slice",
            "replicas": 2,
            "numOfHosts": 4,
            "minReplicas": 0,
            "maxReplicas": 2,
            "template": {
                "spec": {
                    "initContainers": [
                        {"name": "warm", "image": "i", "resources": {"requests": {"cpu": "3"}}}
                    ],
                    "containers": [
                        {
                            "name": "w",
                            "image": "i",
                            "resources": {"requests": {"cpu": "2", "google.com/tpu": "4"}},
                        }
                    ],
                }
            },
        }
    ]
    sets = pod_sets(body)
    assert sets[1] == {"name": "tpu-slice", "count": 8, "requests": {"cpu": "3", "google.com/tpu": "4"}}
    assert total_request(body) == {"cpu": "25", "google.com/tpu": "32"}


def test_worker_group_without_replicas_counts_zero_pods_as_the_crd_default_and_kueue_do():
    body = head_only("HTTPMode", requests={"cpu": "1"})
    body["spec"]["rayClusterSpec"]["workerGroupSpecs"] = [
        {
            "groupName": "workers",
            "minReplicas": 0,
            "maxReplicas": 4,
            "template": {
                "spec": {"containers": [{"name": "w", "image": "i", "resources": {"requests": {"cpu": "8"}}}]}
            },
        }
    ]
    assert pod_sets(body)[1]["count"] == 0
    assert total_request(body) == {"cpu": "1"}


def test_autoscaler_and_sidecar_submitter_are_counted_in_the_head():
    body = head_only("SidecarMode", requests={"cpu": "1", "memory": "1Gi"})
    body["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    assert pod_sets(body) == [{"name": "head", "count": 1, "requests": {"cpu": "2", "memory": "1736Mi"}}]


def test_explain_capacity_shortfall_points_at_the_submitter():
    sets = pod_sets(head_only(**SEED_HEAD))
    shortfall = explain_capacity_shortfall(sets, "cpu", "2", "cluster-queue")
    assert shortfall.problem == (
        "RayJob needs 2.5 CPU (head 2 + submitter 0.5) but ClusterQueue cluster-queue provides at most 2"
    )
    assert shortfall.fix == "raise nominalQuota or use submissionMode HTTPMode"
    assert str(shortfall) == f"{shortfall.problem}; {shortfall.fix}"


def test_explain_capacity_shortfall_for_workers():
    sets = build("llm-train").pod_sets
    shortfall = explain_capacity_shortfall(sets, "nvidia.com/gpu", 4, "team-a-cq")
    assert shortfall.problem == (
        "RayJob needs 8 nvidia.com/gpu (gpu-workers 8 (2 x 4)) but ClusterQueue team-a-cq provides at most 4"
    )
    assert shortfall.fix == "raise nominalQuota or request less nvidia.com/gpu"


# ------------------------------------------------------------------------------------- against the CRDs


def test_every_template_is_valid_against_the_real_crds():
    from kubesim.resources import CRDS_DIR
    from kubesim.schema import load_crd_schemas, validate

    schemas = load_crd_schemas(CRDS_DIR)
    for path in sorted(TEMPLATES_DIR.glob("*.yaml.j2")):
        is_service = "serve" in path.name
        builder = build_rayservice if is_service else build_rayjob
        body = builder(
            path,
            name=NAME,
            namespace="default",
            queue="user-queue",
            priority="dev-priority",
            identity=IDENTITY,
            values=required_values(path),
        ).body
        schema = schemas[("ray.io", "rayservices" if is_service else "rayjobs")]
        assert validate(body, schema) == [], path.name
        body["spec"]["entrypointTypo"] = "python x.py"
        assert [e.field for e in validate(body, schema)] == ["spec.entrypointTypo"], path.name


def test_a_value_the_template_never_reads_is_refused_naming_the_ones_it_reads():
    with pytest.raises(ManifestError) as err:
        build_rayjob(
            "text-classifier",
            name=NAME,
            namespace="default",
            queue="user-queue",
            priority="dev-priority",
            identity=IDENTITY,
            values={"num_epochs": 2, "sim_duration": "30"},
        )
    assert err.value.field == "values"
    assert err.value.value == ["sim_duration"]
    # The fix lists what the user may pass, not the name and namespace the operator always offers.
    assert "'num_epochs'" in err.value.fix and "'name'" not in err.value.fix


def test_explain_capacity_shortfall_for_memory_reads_naturally():
    sets = pod_sets(head_only(**SEED_HEAD))
    shortfall = explain_capacity_shortfall(sets, "memory", "8G", "cluster-queue")
    assert (
        shortfall.problem
        == "RayJob needs 7.65Gi memory (head 7.45Gi + submitter 200Mi) but ClusterQueue cluster-queue provides "
        "at most 7.45Gi"
    )
    assert shortfall.fix == "raise nominalQuota or use submissionMode HTTPMode"
