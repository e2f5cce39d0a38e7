"""The real-stack harness's pure parts: which of Kueue's webhooks it registers and how, how it points the
aggregator at Kueue's visibility server, and the status its pod driver writes."""

import base64

from devtools.realcluster_kueue import kueue_webhooks, visibility_objects
from devtools.realcluster_pods import running_status


def _hook(name: str, group: str, path: str) -> dict:
    return {
        "name": name,
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
        "rules": [
            {"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["x"]}
        ],
        "failurePolicy": "Fail",
    }


def test_only_webhooks_of_installed_groups_are_registered_by_url_with_the_ca():
    manifests = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [
                _hook("mrayjob.kb.io", "ray.io", "/mutate-ray-io-v1-rayjob"),
                _hook("mjobset.kb.io", "jobset.x-k8s.io", "/mutate-jobset"),
                _hook("mpod.kb.io", "", "/mutate--v1-pod"),
            ],
        }
    ]

    [config] = kueue_webhooks(manifests, 9443, b"CA")

    assert config["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    assert [h["name"] for h in config["webhooks"]] == ["mrayjob.kb.io"]
    assert config["webhooks"][0]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-ray-io-v1-rayjob",
        "caBundle": base64.b64encode(b"CA").decode(),
    }
    assert config["webhooks"][0]["failurePolicy"] == "Fail"


def test_a_started_pod_is_running_and_ready_with_its_ip_and_every_container():
    pod = {"spec": {"containers": [{"name": "ray-head", "image": "ray"}, {"name": "sidecar"}]}}

    status = running_status(pod, "10.244.0.7", "2026-01-01T00:00:00Z")

    assert (status["phase"], status["podIP"]) == ("Running", "10.244.0.7")
    assert {c["type"] for c in status["conditions"] if c["status"] == "True"} >= {"Ready", "ContainersReady"}
    assert [c["name"] for c in status["containerStatuses"] if c["ready"]] == ["ray-head", "sidecar"]


def test_the_visibility_apiservices_reach_the_loopback_server_through_an_externalname_service():
    service, *apiservices = visibility_objects(40123, b"CA")

    # Endpoints on 127.0.0.1 are refused by the API server; an ExternalName is dialled by name.
    assert service["spec"] == {"type": "ExternalName", "externalName": "localhost"}
    assert (service["metadata"]["namespace"], service["metadata"]["name"]) == (
        "kueue-system",
        "visibility-server",
    )
    assert [a["metadata"]["name"] for a in apiservices] == [
        "v1beta2.visibility.kueue.x-k8s.io",
        "v1beta1.visibility.kueue.x-k8s.io",
    ]
    for apiservice in apiservices:
        spec = apiservice["spec"]
        assert spec["service"] == {"name": "visibility-server", "namespace": "kueue-system", "port": 40123}
        assert spec["caBundle"] == base64.b64encode(b"CA").decode() and "insecureSkipTLSVerify" not in spec
