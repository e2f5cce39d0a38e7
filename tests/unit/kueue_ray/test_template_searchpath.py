"""Finding templates by name: a user's own folders first (the operator's or the DAG's
``template_searchpath``), then the templates the plugin ships as package data (``kueue_ray/templates/``)."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import kueue_ray
import pytest
from airflow.sdk import DAG
from kueue_ray.errors import ManifestError
from kueue_ray.manifests import TEMPLATES_DIR, build_rayjob, resolve_template
from kueue_ray.naming import AirflowIdentity
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.submitting import template_searchpath

IDENTITY = AirflowIdentity("pipe", "train", "manual__1", -1, 1)


def own_template(folder: Path, name: str, entrypoint: str) -> Path:
    """A copy of the shipped llm-train template under ``name`` in ``folder``, with its own entrypoint."""
    body = (TEMPLATES_DIR / "llm-train.yaml.j2").read_text()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml.j2"
    path.write_text(re.sub(r"entrypoint: .*", f"entrypoint: {entrypoint}", body, count=1))
    return path


def build(template: str, searchpath) -> dict:
    return build_rayjob(
        template,
        name="pipe-train",
        namespace="ml",
        queue="team-a",
        priority="prod-priority",
        identity=IDENTITY,
        template_searchpath=searchpath,
    ).body


def test_a_name_is_found_in_the_users_folder_before_the_shipped_one(tmp_path):
    own_template(tmp_path / "mine", "llm-train", "python mine.py")
    assert resolve_template("llm-train", [tmp_path / "mine"]) == tmp_path / "mine" / "llm-train.yaml.j2"
    assert resolve_template("llm-train.yaml.j2", str(tmp_path / "mine")).parent == tmp_path / "mine"
    assert build("llm-train", [tmp_path / "mine"])["spec"]["entrypoint"] == "python mine.py"


def test_folders_are_searched_in_order_and_the_shipped_templates_last(tmp_path):
    own_template(tmp_path / "first", "train", "python first.py")
    own_template(tmp_path / "second", "train", "python second.py")
    own_template(tmp_path / "second", "other", "python other.py")
    folders = [tmp_path / "first", tmp_path / "second"]
    assert resolve_template("train", folders).parent == tmp_path / "first"
    assert resolve_template("other", folders).parent == tmp_path / "second"
    assert resolve_template("text-classifier", folders) == TEMPLATES_DIR / "text-classifier.yaml.j2"
    assert resolve_template("text-classifier") == TEMPLATES_DIR / "text-classifier.yaml.j2"


def test_a_missing_template_names_itself_the_folders_searched_and_the_fix(tmp_path):
    own_template(tmp_path / "mine", "train", "python mine.py")
    with pytest.raises(ManifestError) as error:
        resolve_template("trian", [tmp_path / "mine"])
    message = str(error.value)
    assert "trian" in message
    assert str(tmp_path / "mine") in message and str(TEMPLATES_DIR) in message
    assert "train.yaml.j2" in message and "llm-train.yaml.j2" in message  # what there is to choose from
    assert "template_searchpath" in message and "trian.yaml.j2" in message


def test_the_operator_searches_its_own_folders_else_its_dags(tmp_path):
    with DAG("pipe", schedule=None, template_searchpath=[str(tmp_path / "dag")]):
        inherits = SubmitRayJobOperator(task_id="a", template="t", local_queue="q", priority="p")
        overrides = SubmitRayJobOperator(
            task_id="b", template="t", local_queue="q", priority="p", template_searchpath=str(tmp_path / "op")
        )
    alone = SubmitRayJobOperator(task_id="c", template="t", local_queue="q", priority="p")
    assert list(template_searchpath(inherits, inherits.template_searchpath)) == [str(tmp_path / "dag")]
    assert template_searchpath(overrides, overrides.template_searchpath) == str(tmp_path / "op")
    assert template_searchpath(alone, alone.template_searchpath) is None


def test_a_users_template_renders_with_values(tmp_path):
    own_template(tmp_path / "mine", "echo", "{{ cmd }}")
    body = build_rayjob(
        "echo",
        name="pipe-train",
        namespace="ml",
        queue="team-a",
        priority="prod-priority",
        identity=IDENTITY,
        values={"cmd": "python echo.py"},
        template_searchpath=tmp_path / "mine",
    ).body
    assert body["spec"]["entrypoint"] == "python echo.py"


ALONE = textwrap.dedent(
    """
    import json, sys
    import kueue_ray
    from kueue_ray.manifests import AirflowIdentity, build_rayjob, build_rayservice, resolve_template

    identity = AirflowIdentity("pipe", "train", "manual__1", -1, 1)
    job = build_rayjob(
        "text-classifier", name="pipe-train", namespace="ml", queue="team-a", priority="prod-priority",
        identity=identity,
    )
    service = build_rayservice(
        "aurora-serve", name="pipe-serve", namespace="ml", queue="team-a", priority="prod-priority",
        identity=identity, values={"model_path": "/mnt/models/x"},
    )
    print(json.dumps({
        "plugin": kueue_ray.__file__,
        "template": str(resolve_template("text-classifier")),
        "job": job.body,
        "service": service.body["kind"],
    }))
    """
)


def test_the_plugin_copied_alone_still_renders_a_pipelines_rayjob(tmp_path):
    """The plugin folder on its own (an image's plugins folder, a ``git archive`` of ``plugins/``): no
    ``include/`` beside it, yet the shipped templates are found, as package data of ``kueue_ray``."""
    plugins = tmp_path / "plugins"
    shutil.copytree(
        Path(kueue_ray.__file__).parent, plugins / "kueue_ray", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    ran = subprocess.run(
        [sys.executable, "-c", ALONE],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(plugins)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout)
    assert Path(seen["plugin"]).is_relative_to(plugins), "the copy, not this checkout, was imported"
    assert seen["template"] == str(plugins / "kueue_ray" / "templates" / "text-classifier.yaml.j2")
    assert seen["job"]["kind"] == "RayJob" and seen["job"]["spec"]["suspend"] is True
    assert seen["job"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert seen["service"] == "RayService"
