"""Finding and rendering RayJob / RayService templates.

Templates are Jinja2 files rendered so that user values can never change the YAML structure: every
``{{ expression }}`` is emitted as a quoted YAML scalar (JSON), then the text is parsed with
``yaml.safe_load``. A DAG param such as ``"x\\nkind: Pod"`` therefore stays one string. A consequence for
template authors: an expression must be a whole YAML value (``key: {{ value }}``); build composite
strings inside the expression (``{{ "s3://bucket/" ~ run }}``). The ``to_yaml`` filter turns a mapping
into YAML text, for ``runtimeEnvYAML`` and ``serveConfigV2``.

A template is named in the operator's (or its DAG's) ``template_searchpath`` first, then in the templates
shipped in this package (the ``*.yaml.j2`` beside this file, package data found with ``importlib.resources``,
so the plugin finds them wherever its folder is copied: a Docker image's plugins folder, a ``git archive``
of ``plugins/``). To change a shipped template, copy it into a folder of your own and name that folder in
``template_searchpath``: yours is found first, and an upgrade of the plugin leaves it alone.
Apart from ``kueue_ray.manifests`` because where a template comes from and how text becomes a dict are one
concern; what the dict must contain is another.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import yaml

from kueue_ray.errors import ManifestError

TEMPLATES_DIR: Traversable = files("kueue_ray.templates")
"""The shipped templates: this package's own ``*.yaml.j2`` files. Named in full, not ``__name__``:
Airflow's plugin loader also runs every file of the plugins folder as a module of its own, this one as
``__init__``, which is no package to find files in."""


def plain(value: Any) -> Any:
    """Walk a rendered value; an undefined variable nested in a dict/list literal raises here, naming it."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises UndefinedError with the variable's name
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _yaml_scalar(value: Any) -> str:
    """Jinja ``finalize``: every expression becomes a quoted scalar or a JSON flow collection."""
    value = plain(value)
    try:
        return json.dumps(value)
    except TypeError:
        return json.dumps(str(value))


def to_yaml(value: Any) -> str:
    return yaml.safe_dump(plain(value), sort_keys=False, default_flow_style=False)


_ENV = jinja2.Environment(
    undefined=jinja2.StrictUndefined,
    finalize=_yaml_scalar,
    autoescape=False,
    keep_trailing_newline=True,
)
_ENV.filters["to_yaml"] = to_yaml


SearchPath = str | os.PathLike | Sequence[str | os.PathLike] | None
"""Folders to look for templates in, as Airflow's ``template_searchpath`` is given: one or a list."""


def template_folders(searchpath: SearchPath = None) -> list[Traversable]:
    """The folders a template name is looked up in, in order: ``searchpath`` (a user's project folders),
    then the templates shipped with the plugin (``TEMPLATES_DIR``)."""
    if searchpath is None:
        given: list = []
    elif isinstance(searchpath, str | os.PathLike):
        given = [searchpath]
    else:
        given = list(searchpath)
    folders: list[Traversable] = [Path(folder) for folder in given]
    return folders + ([TEMPLATES_DIR] if TEMPLATES_DIR not in folders else [])


def resolve_template(template: str | os.PathLike, searchpath: SearchPath = None) -> Traversable:
    """Find a template: an absolute path, or a name (".yaml.j2" may be omitted) or relative path looked up
    in each folder of ``template_folders(searchpath)`` and last in the working directory."""
    path = Path(template)
    folders = template_folders(searchpath)
    candidates: list[Traversable]
    if path.is_absolute():
        candidates = [path]
    else:
        names = (path.as_posix(), f"{path.as_posix()}.yaml.j2")
        candidates = [folder.joinpath(name) for folder in folders for name in names] + [path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    available = sorted(
        {
            p.name
            for folder in folders
            if folder.is_dir()
            for p in folder.iterdir()
            if p.name.endswith(".yaml.j2")
        }
    )
    raise ManifestError(
        f"template not found in {[str(folder) for folder in folders]} nor as a path",
        field="template",
        value=str(template),
        fix=(
            f"use one of {available}, a path to a .yaml.j2 file, or add the folder holding "
            f"{path.name if path.name.endswith('.yaml.j2') else f'{path.name}.yaml.j2'} to the operator's "
            "template_searchpath (or the DAG's)"
        ),
    )


def render_template(
    template: str | os.PathLike | Mapping,
    values: Mapping[str, Any] | None = None,
    searchpath: SearchPath = None,
    *,
    implicit: Mapping[str, Any] | None = None,
) -> dict:
    """Render a template file (found by ``resolve_template``) or copy a ready dict into a manifest dict.

    ``values`` are the user's: each must be read by the template, since a misspelt or stale key would
    otherwise be dropped silently and the RayJob run with the template's default. ``implicit`` ones (the
    object's name and namespace) are offered to every template, which may ignore them.
    """
    if isinstance(template, Mapping):
        return copy.deepcopy(dict(template))
    path = resolve_template(template, searchpath)
    values = dict(values or {})
    try:
        parsed = _ENV.parse(path.read_text())
        read = jinja2.meta.find_undeclared_variables(parsed)
        unread = sorted(set(values) - read)
        if unread:
            wanted = sorted(read - set(implicit or {}))
            raise ManifestError(
                f"template {path.name} does not read {unread}",
                field="values",
                value=unread,
                fix=f"use the values it reads: {wanted}"
                if wanted
                else "remove values: this template reads none",
            )
        text = _ENV.from_string(parsed).render(**{**dict(implicit or {}), **values})
    except jinja2.UndefinedError as exc:
        raise ManifestError(
            f"template {path.name} needs a value: {exc.message}",
            field="values",
            value=sorted(values),
            fix="pass the missing variable in values={...}",
        ) from exc
    except jinja2.TemplateError as exc:
        raise _template_error(
            template, f"template {path.name} does not render: {exc}", "fix the Jinja syntax"
        ) from exc
    try:
        body = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _template_error(
            template,
            f"template {path.name} renders invalid YAML: {exc}",
            "use every {{ expression }} as a whole YAML value (key: {{ value }})",
        ) from exc
    if not isinstance(body, dict):
        raise _template_error(template, "template does not render to a mapping", "check the file")
    return body


def _template_error(template: str | os.PathLike, problem: str, fix: str) -> ManifestError:
    """A ManifestError about the template file itself (as opposed to the values given to it)."""
    return ManifestError(problem, field="template", value=str(template), fix=fix)
