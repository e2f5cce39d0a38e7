"""Kueue's manager Configuration as kubesim reads it: waitForPodsReady and the enabled integrations."""

from __future__ import annotations

import pytest

from kubesim.kueue.config import KueueConfig, parse_duration


def test_kueue_defaults_and_backoff():
    config = KueueConfig()
    assert (config.pods_ready_timeout, config.effective_recovery_timeout) == (1800.0, 1800.0)
    assert [config.requeue_backoff(n) for n in (1, 2, 3, 7, 8)] == [60, 120, 240, 3600, 3600]


def test_kueue_configuration_document_is_read():
    config = KueueConfig.from_configuration(
        {
            "waitForPodsReady": {
                "timeout": "1h30m",
                "recoveryTimeout": "90s",
                "requeuingStrategy": {
                    "backoffBaseSeconds": 5,
                    "backoffMaxSeconds": 30,
                    "backoffLimitCount": 3,
                },
            }
        }
    )
    assert (config.pods_ready_timeout, config.recovery_timeout) == (5400.0, 90.0)
    assert (config.backoff_base, config.backoff_max, config.backoff_limit_count) == (5.0, 30.0, 3)
    with pytest.raises(ValueError, match="30 minutes"):
        parse_duration("30 minutes")


def test_kueue_integrations_default_to_the_shipped_frameworks_and_can_leave_rayservice_out():
    assert KueueConfig().frameworks == {
        "ray.io/rayjob",
        "ray.io/raycluster",
        "ray.io/rayservice",
        "batch/job",
    }
    config = KueueConfig.from_configuration(
        {"integrations": {"frameworks": ["batch/job", "ray.io/rayjob", "ray.io/raycluster"]}}
    )
    assert "ray.io/rayservice" not in config.frameworks
    assert "ray.io/raycluster" in config.frameworks
