"""The Kueue setup and the RayJob templates against the real CRDs (strict: unknown fields fail), and the
sizing promises their comments make."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from kueue_ray.capacity import find_shortfall, max_capacity
from kueue_ray.manifests import (
    TEMPLATES_DIR,
    AirflowIdentity,
    build_rayjob,
    build_rayservice,
    render_template,
)

from kubesim.resources import CRDS_DIR
from kubesim.schema import load_crd_schemas, validate
from tests.deployment_files import RBAC, object_keys, render_rbac, rights_of, rule_rights

ROOT = Path(__file__).resolve().parents[3]
KUEUE_DIR = ROOT / "include" / "manifests" / "kueue"
IDENTITY = AirflowIdentity(dag_id="d", task_id="t", run_id="manual__1", map_index=-1, try_number=1)


def documents(*paths: Path) -> list[dict]:
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc]


def kueue_files() -> list[Path]:
    return sorted(KUEUE_DIR.rglob("*.yaml"))


@pytest.fixture(scope="module")
def schemas():
    return load_crd_schemas(CRDS_DIR)


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.mark.parametrize("path", kueue_files(), ids=lambda p: str(p.relative_to(KUEUE_DIR)))
def test_kueue_manifests_validate_against_the_crds(path, schemas):
    for doc in documents(path):
        group, _, version = doc["apiVersion"].rpartition("/")
        if group != "kueue.x-k8s.io":
            continue
        assert version == "v1beta2", f"{doc['kind']} {doc['metadata']['name']} must use v1beta2"
        plural = {"WorkloadPriorityClass": "workloadpriorityclasses"}.get(
            doc["kind"], doc["kind"].lower() + "s"
        )
        errors = validate(doc, schemas[(group, plural)])
        assert errors == [], f"{path.name} {doc['kind']}/{doc['metadata']['name']}: {errors}"


def test_strict_validation_rejects_an_unknown_field(schemas):
    queue = by_kind(documents(KUEUE_DIR / "single-queue" / "cluster-queue.yaml"), "ClusterQueue")[
        "cluster-queue"
    ]
    queue["spec"]["cohort"] = "v1beta1-name"  # renamed to cohortName in v1beta2
    assert validate(queue, schemas[("kueue.x-k8s.io", "clusterqueues")])


def test_base_has_namespace_flavors_and_priority_classes():
    docs = documents(*sorted(KUEUE_DIR.glob("*.yaml")))
    assert set(by_kind(docs, "Namespace")) == {"ray", "airflow"}
    flavors = by_kind(docs, "ResourceFlavor")
    assert set(flavors) == {"default", "gpu"}
    assert flavors["gpu"]["spec"]["nodeLabels"] == {"accelerator": "nvidia"}
    classes = by_kind(docs, "WorkloadPriorityClass")
    assert {name: c["value"] for name, c in classes.items()} == {"prod-priority": 1000, "dev-priority": 100}
    assert all(c.get("description") for c in classes.values())


def test_each_setup_defines_the_local_queues_the_dags_offer():
    single = documents(*sorted((KUEUE_DIR / "single-queue").glob("*.yaml")))
    team = documents(*sorted((KUEUE_DIR / "team-queues").glob("*.yaml")))
    assert {n: q["metadata"]["namespace"] for n, q in by_kind(single, "LocalQueue").items()} == {
        "user-queue": "ray"
    }
    assert {n: q["spec"]["clusterQueue"] for n, q in by_kind(team, "LocalQueue").items()} == {
        "team-a": "team-a-cq",
        "team-b": "team-b-cq",
    }
    assert all(q["metadata"]["namespace"] == "ray" for q in by_kind(team, "LocalQueue").values())


def text_classifier(mode: str):
    return build_rayjob(
        "text-classifier",
        name="tc",
        namespace="ray",
        queue="user-queue",
        priority="dev-priority",
        identity=IDENTITY,
        values={"submission_mode": mode},
    )


@pytest.mark.parametrize("mode", ["K8sJobMode", "HTTPMode"])
def test_single_queue_holds_exactly_one_text_classifier(mode):
    queue = by_kind(documents(KUEUE_DIR / "single-queue" / "cluster-queue.yaml"), "ClusterQueue")[
        "cluster-queue"
    ]
    assert queue["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
    capacity = max_capacity(queue)
    one = text_classifier(mode).pod_sets
    assert find_shortfall(one, capacity) is None
    two = [dict(ps, count=ps["count"] * 2) for ps in one]
    assert find_shortfall(two, capacity) is not None


def test_walkthrough_quota_without_the_submitter_would_never_fit():
    """Why the single queue counts K8sJobMode's submitter: the walkthrough's 2 CPU / 8G leaves it out."""
    walkthrough = {
        "default": {"cpu": Decimal(2), "memory": Decimal(8 * 10**9)},
        "gpu": {"nvidia.com/gpu": Decimal(1)},
    }
    assert find_shortfall(text_classifier("K8sJobMode").pod_sets, walkthrough) == ("cpu", Decimal(2))


def test_team_queues_share_gpus_in_a_cohort_and_reclaim_them():
    docs = documents(*sorted((KUEUE_DIR / "team-queues").glob("*.yaml")))
    queues = by_kind(docs, "ClusterQueue")
    assert set(queues) == {"team-a-cq", "team-b-cq"}
    for queue in queues.values():
        spec = queue["spec"]
        assert spec["cohortName"] == "shared-cohort"
        assert spec["preemption"]["reclaimWithinCohort"] != "Never"
        assert spec["preemption"]["withinClusterQueue"] == "LowerPriority"
        gpu = [
            r
            for group in spec["resourceGroups"]
            for flavor in group["flavors"]
            for r in flavor["resources"]
            if r["name"] == "nvidia.com/gpu"
        ]
        assert [(str(r["nominalQuota"]), str(r["borrowingLimit"])) for r in gpu] == [("4", "4")]
    capacity = max_capacity(queues["team-a-cq"], cluster_queues=queues.values())
    assert capacity["gpu"]["nvidia.com/gpu"] == 8  # 4 guaranteed + 4 borrowed from the idle team


@pytest.mark.parametrize("template", ["aurora-finetune", "llm-train"])
def test_eight_gpu_fine_tunes_fit_a_team_queue_by_borrowing(template):
    queues = by_kind(documents(*sorted((KUEUE_DIR / "team-queues").glob("*.yaml"))), "ClusterQueue")
    built = build_rayjob(
        template, name="big", namespace="ray", queue="team-a", priority="dev-priority", identity=IDENTITY
    )
    capacity = max_capacity(queues["team-a-cq"], cluster_queues=queues.values())
    assert find_shortfall(built.pod_sets, capacity) is None


def gpus_requested(built) -> Decimal:
    return sum(
        (Decimal(str(ps["requests"].get("nvidia.com/gpu", 0))) * ps["count"] for ps in built.pod_sets),
        Decimal(0),
    )


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_text_classifier_asks_kueue_for_one_gpu_per_ray_train_worker(workers, schemas):
    """Ray Train starts num_workers workers of one GPU each: a RayJob asking Kueue for fewer GPUs would be
    admitted and then wait inside its cluster, holding the queue, for GPUs that never come."""
    built = build_rayjob(
        "text-classifier",
        name="tc",
        namespace="ray",
        queue="team-a",
        priority="dev-priority",
        identity=IDENTITY,
        values={"num_workers": workers},
    )
    assert gpus_requested(built) == workers
    env = yaml.safe_load(built.body["spec"]["runtimeEnvYAML"])["env_vars"]
    assert (env["NUM_WORKERS"], env["GPUS_PER_WORKER"]) == (str(workers), "1")
    groups = built.body["spec"]["rayClusterSpec"].get("workerGroupSpecs") or []
    assert sum(g["replicas"] for g in groups) == workers - 1  # the head's GPU holds the first worker
    assert validate(built.body, schemas[("ray.io", "rayjobs")]) == []


def test_text_classifier_with_eight_workers_fits_a_team_queue_but_never_the_single_queue():
    team = by_kind(documents(*sorted((KUEUE_DIR / "team-queues").glob("*.yaml"))), "ClusterQueue")
    single = by_kind(documents(KUEUE_DIR / "single-queue" / "cluster-queue.yaml"), "ClusterQueue")
    built = build_rayjob(
        "text-classifier",
        name="tc",
        namespace="ray",
        queue="team-a",
        priority="dev-priority",
        identity=IDENTITY,
        values={"num_workers": 8},
    )
    assert (
        find_shortfall(built.pod_sets, max_capacity(team["team-a-cq"], cluster_queues=team.values())) is None
    )
    assert find_shortfall(built.pod_sets, max_capacity(single["cluster-queue"])) is not None


TEMPLATE_VALUES = {
    "text-classifier": {},
    "aurora-finetune": {},
    "llm-train": {},
    "batch-inference": {"model_path": "/mnt/models/llm"},
}


@pytest.mark.parametrize("template", sorted(TEMPLATE_VALUES))
def test_rayjob_templates_render_valid_rayjobs(template, schemas):
    built = build_rayjob(
        template,
        name="x",
        namespace="ray",
        queue="user-queue",
        priority="dev-priority",
        identity=IDENTITY,
        values=TEMPLATE_VALUES[template],
    )
    assert validate(built.body, schemas[("ray.io", "rayjobs")]) == []


def test_serve_template_renders_a_valid_rayservice(schemas):
    built = build_rayservice(
        "aurora-serve",
        name="aurora-serve-1",
        namespace="ray",
        queue="team-a",
        priority="prod-priority",
        identity=IDENTITY,
        values={"model_path": "/mnt/models/aurora"},
    )
    assert validate(built.body, schemas[("ray.io", "rayservices")]) == []
    assert built.body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"


def test_rbac_grants_together_what_the_plugin_uses_in_the_namespace():
    """The union of the components' Roles; which component holds which is tests/unit/project/test_helm_values.py's."""
    docs = render_rbac("airflow")
    namespaced = rule_rights(rule for d in docs if d["kind"] == "Role" for rule in d["rules"])

    def verbs(group: str, resource: str) -> set[str]:
        return {verb for g, r, verb in namespaced if (g, r) == (group, resource)}

    assert verbs("ray.io", "rayjobs") == {"create", "get", "list", "watch", "patch", "delete"}
    assert verbs("kueue.x-k8s.io", "workloads") == {"list", "watch"}, "listed by label only"
    assert verbs("", "pods/log") == {"get"}
    assert verbs("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads") == {"get"}


def test_rbac_cluster_roles_only_read():
    docs = render_rbac("airflow")
    cluster = [rule for d in docs if d["kind"] == "ClusterRole" for rule in d["rules"]]
    assert {verb for rule in cluster for verb in rule["verbs"]} <= {"get", "list", "watch"}
    assert {r for rule in cluster for r in rule["resources"]} <= {
        "admissionchecks",
        "multikueueconfigs",
        "clusterqueues",
        "clusterqueues/pendingworkloads",
        "cohorts",
        "workloadpriorityclasses",
    }
    every = [rule for d in docs if d["kind"] in ("Role", "ClusterRole") for rule in d["rules"]]
    assert all("*" not in rule["resources"] + rule["verbs"] for rule in every)


@pytest.mark.parametrize(
    ("first", "second"),
    [("airflow", "airflow-staging"), ("team-a", "team-b"), ("a", "a-api"), ("airflow", "ray")],
)
def test_two_airflow_namespaces_render_rbac_that_shares_no_object(first, second):
    """Applying the RBAC for a second Airflow namespace must add objects, never overwrite the first's."""
    one, two = render_rbac(first), render_rbac(second)
    assert object_keys(one) & object_keys(two) == set()
    assert len(object_keys(one)) == len(one), "an object defined twice in one rendering"
    for docs, namespace in ((one, first), (two, second)):
        for doc in docs:
            if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
                assert {(s["namespace"], s["name"]) for s in doc["subjects"]} <= {
                    (d["metadata"]["namespace"], d["metadata"]["name"])
                    for d in docs
                    if d["kind"] == "ServiceAccount"
                }
                assert all(s["namespace"] == namespace for s in doc["subjects"])
        assert rights_of(docs, namespace, "kueue-ray-worker").all(), "a binding points at a missing role"


def test_rbac_template_has_only_the_namespace_placeholder():
    text = RBAC.read_text()
    assert "${AIRFLOW_NAMESPACE}" in text
    with pytest.raises((KeyError, ValueError)):
        render_rbac("airflow", text.replace("${AIRFLOW_NAMESPACE}", "${AIRFLOW_NAMESPACES}", 1))
    sed = re.search(r"sed 's/(\S+)/airflow/g' include/manifests/rbac/rbac.yaml \| kubectl apply -f -", text)
    assert sed and sed.group(1) == "${AIRFLOW_NAMESPACE}", "the documented substitution"
    readme = (ROOT / "README.md").read_text()
    assert (
        "sed 's/${AIRFLOW_NAMESPACE}/airflow/g' include/manifests/rbac/rbac.yaml | kubectl apply -f -"
        in readme
    )


# ------------------------------------------------------------------------------------------ GPU taints

GPU_TAINTS = (
    {"key": "sku", "value": "gpu", "effect": "NoSchedule"},  # AKS GPU node pools
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},  # NVIDIA GPU operator
)


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    """The kubelet's rule: same key (or an empty key with Exists), same effect (or none), and Exists or
    an equal value."""
    for toleration in tolerations or []:
        if toleration.get("effect") not in (None, "", taint["effect"]):
            continue
        operator = toleration.get("operator", "Equal")
        if operator == "Exists" and toleration.get("key") in (None, "", taint["key"]):
            return True
        same_key = toleration.get("key") == taint["key"]
        if operator == "Equal" and same_key and toleration.get("value", "") == taint["value"]:
            return True
    return False


def gpu_pod_templates(body: dict) -> dict[str, dict]:
    """Every pod template of a RayJob / RayService whose containers ask for an NVIDIA GPU."""
    spec = body["spec"]
    cluster = spec.get("rayClusterSpec") or spec.get("rayClusterConfig")
    templates = {"head": cluster["headGroupSpec"]["template"]}
    for group in cluster.get("workerGroupSpecs") or []:
        templates[group["groupName"]] = group["template"]
    if spec.get("submitterPodTemplate"):
        templates["submitter"] = spec["submitterPodTemplate"]

    def wants_gpu(template: dict) -> bool:
        return any(
            "nvidia.com/gpu"
            in {
                **(c.get("resources") or {}).get("limits", {}),
                **(c.get("resources") or {}).get("requests", {}),
            }
            for c in template["spec"]["containers"]
        )

    return {name: t for name, t in templates.items() if wants_gpu(t)}


def test_the_gpu_flavor_carries_the_tolerations_kueue_injects_for_tainted_gpu_pools():
    flavor = by_kind(documents(KUEUE_DIR / "10-resource-flavors.yaml"), "ResourceFlavor")["gpu"]
    tolerations = flavor["spec"]["tolerations"]
    assert all(tolerates(tolerations, taint) for taint in GPU_TAINTS)
    assert not tolerates(tolerations, {"key": "dedicated", "value": "x", "effect": "NoSchedule"})


def required_values(template: str) -> dict:
    """The values a shipped template cannot render without (each documents its own)."""
    text = (TEMPLATES_DIR / f"{template}.yaml.j2").read_text()
    return {"model_path": "/mnt/models/x"} if "model_path" in text else {}


@pytest.mark.parametrize(
    "template", sorted(p.name.removesuffix(".yaml.j2") for p in TEMPLATES_DIR.glob("*.yaml.j2"))
)
def test_every_gpu_pod_of_every_template_tolerates_the_gpu_taints(template):
    values = required_values(template)
    body = render_template(template, values)
    build = build_rayservice if body["kind"] == "RayService" else build_rayjob
    built = build(
        template,
        name="x",
        namespace="ray",
        queue="team-a",
        priority="dev-priority",
        identity=IDENTITY,
        values=values,
    )
    gpu_pods = gpu_pod_templates(built.body)
    assert gpu_pods, f"{template} asks for no GPU: the check would prove nothing"
    for name, pod in gpu_pods.items():
        missing = [t for t in GPU_TAINTS if not tolerates(pod["spec"].get("tolerations"), t)]
        assert not missing, f"{template}: the {name} pods do not tolerate {missing}"


@pytest.mark.parametrize(
    "template", sorted(p.name.removesuffix(".yaml.j2") for p in TEMPLATES_DIR.glob("*.yaml.j2"))
)
def test_no_template_sends_kubesim_only_metadata_to_a_real_cluster(template):
    """KubeRay copies a RayJob's annotations and labels onto its RayCluster: nothing kubesim-only may go."""
    text = (TEMPLATES_DIR / f"{template}.yaml.j2").read_text()
    assert "kubesim" not in text
    body = render_template(template, required_values(template))
    metadata = body["metadata"]
    keys = [*(metadata.get("annotations") or {}), *(metadata.get("labels") or {})]
    assert not [key for key in keys if "kubesim" in key]
