"""MultiKueue's connection rules (``kubesim.multikueue.connections``) against Kueue v0.19.2's
``multikueuecluster.go`` (loadClientConfig, validateKubeconfig, retryAfter) and ``admissioncheck.go``
(the ACReconciler's Active condition)."""

from __future__ import annotations

import base64
import doctest

import pytest
import yaml

from kubesim.apiserver import clusters as clusters_module
from kubesim.kueue import jobs, webhook
from kubesim.multikueue import connections
from kubesim.multikueue.connections import ConfigError, check_verdict, read_kubeconfig, server_of


@pytest.mark.parametrize("module", [connections, clusters_module, jobs, webhook])
def test_the_documented_examples_hold(module):
    assert doctest.testmod(module).failed == 0


def kubeconfig(cluster: dict | None = None, user: dict | None = None) -> bytes:
    return yaml.safe_dump(
        {
            "clusters": [{"name": "w", "cluster": {"server": "http://127.0.0.1:6443", **(cluster or {})}}],
            "users": [{"name": "u", "user": {"token": "t", **(user or {})}}],
            "contexts": [{"name": "c", "context": {"cluster": "w", "user": "u"}}],
            "current-context": "c",
        }
    ).encode()


def mkc(location: str = "w1-secret", **ref) -> dict:
    return {"spec": {"clusterSource": {"kubeConfig": {"location": location, **ref}}}}


def test_a_secret_kubeconfig_is_read_from_its_kubeconfig_key():
    secret = {"data": {"kubeconfig": base64.b64encode(kubeconfig()).decode()}}
    assert server_of(read_kubeconfig(mkc(), secret)) == "http://127.0.0.1:6443"


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        (None, 'Secret "w1-secret" not found'),
        ({"data": {"config": "eA=="}}, 'key "kubeconfig" not found in secret "w1-secret"'),
    ],
)
def test_a_missing_secret_or_key_is_a_bad_kubeconfig(secret, message):
    with pytest.raises(ConfigError) as err:
        read_kubeconfig(mkc(), secret)
    assert (err.value.reason, str(err.value)) == ("BadKubeConfig", message)


def test_a_cluster_profile_needs_a_feature_gate_that_is_off():
    with pytest.raises(ConfigError) as err:
        read_kubeconfig({"spec": {"clusterSource": {"clusterProfileRef": {"name": "p"}}}}, None)
    assert err.value.reason == "MultiKueueClusterProfileFeatureDisabled"


@pytest.mark.parametrize(
    ("cluster", "user", "message"),
    [
        ({"insecure-skip-tls-verify": True}, None, "insecure TLS verification is not allowed for cluster w"),
        (
            {"certificate-authority": "/ca.crt"},
            None,
            "certificate-authority file paths are not allowed, use certificate-authority-data for cluster w",
        ),
        (None, {"tokenFile": "/t"}, "tokenFile is not allowed"),
        (None, {"username": "a", "password": "b"}, "basic auth is not allowed"),
        (None, {"exec": {"command": "x"}}, "exec plugins are not allowed"),
        ({"server": "http://bad_host:1"}, None, "untrusted server endpoint"),
    ],
)
def test_an_unsafe_kubeconfig_is_refused(cluster, user, message):
    with pytest.raises(ConfigError) as err:
        server_of(kubeconfig(cluster, user))
    assert (err.value.reason, str(err.value)) == ("InsecureKubeConfig", message)


def test_the_check_is_inactive_without_its_config_or_with_a_bad_reference():
    ac = {"spec": {"parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "c"}}}
    assert check_verdict(ac, None, {}) == (
        "False",
        "BadConfig",
        'Cannot load the AdmissionChecks parameters: multikueueconfigs.kueue.x-k8s.io "c" not found',
    )
    wrong = {
        "spec": {
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "c"}
        }
    }
    assert check_verdict(wrong, None, {})[2].endswith(
        'wrong kind "ProvisioningRequestConfig", expecting "MultiKueueConfig": bad parameters reference'
    )


def test_missing_and_inactive_clusters_are_both_named():
    ac = {"spec": {"parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "c"}}}
    config = {"spec": {"clusters": ["a", "b"]}}
    assert check_verdict(ac, config, {"b": {}}) == (
        "False",
        "NoUsableClusters",
        "Missing clusters: [a], Inactive clusters: [b]",
    )
