"""PublishRayJobOutputOperator: record what a RayJob produced as an event on an Asset.

A pipeline's RayJob writes a model or checkpoint to a path; the next step (serving it, batch inference,
another DAG scheduled on the Asset) needs that path and how it was made. This operator adds one Asset event
whose ``extra`` carries the path and the RayJob's story: which RayJob, queue and priority, and its queue /
run timeline from the task that waited for it. Downstream tasks read the path back from this task's return
value (XCom) or from the Asset's events.

Importing it costs what defining an operator costs (it is imported by DAG files).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from kueue_ray.results import RAYJOB_XCOM_KEY

if TYPE_CHECKING:
    from airflow.sdk import Asset, Context

TIMELINE_FIELDS = ("submitted_at", "finished_at", "queued_seconds", "running_seconds", "preemption_count")


class PublishRayJobOutputOperator(BaseOperator):
    """Add an event to ``asset`` naming ``path`` and the RayJob that wrote it; return the event's extra.

    .. code-block:: python

        from kueue_ray.publish import PublishRayJobOutputOperator

        publish = PublishRayJobOutputOperator(
            task_id="publish_model",
            asset=LLM_MODEL,
            path="/mnt/models/llm/{{ run_id }}",
            path_key="model_path",
            submit_task_id="train",
            wait_task_id="wait_train",
        )

    :param asset: the Asset the event is added to (it becomes the task's outlet).
    :param path: where the RayJob wrote its output (templated).
    :param path_key: the key of ``path`` in the event's extra and the return value.
    :param submit_task_id: the ``SubmitRayJobOperator`` task (its ``rayjob`` XCom names RayJob, queue, priority).
    :param wait_task_id: the task whose ``timeline`` XCom tells how it ran (the sensor); default the submit task.
    """

    template_fields: Sequence[str] = ("path",)
    ui_color = "#f3efe0"

    def __init__(
        self,
        *,
        asset: Asset,
        path: str,
        submit_task_id: str,
        wait_task_id: str | None = None,
        path_key: str = "path",
        **kwargs: Any,
    ) -> None:
        super().__init__(outlets=[asset], **kwargs)
        self.asset = asset
        self.path = path
        self.path_key = path_key
        self.submit_task_id = submit_task_id
        self.wait_task_id = wait_task_id or submit_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        rayjob = ti.xcom_pull(task_ids=self.submit_task_id, key=RAYJOB_XCOM_KEY) or {}
        timeline = ti.xcom_pull(task_ids=self.wait_task_id, key="timeline") or {}
        extra = {
            self.path_key: self.path,
            "rayjob": f"{rayjob.get('namespace')}/{rayjob.get('name')}",
            "queue": rayjob.get("queue"),
            "priority": rayjob.get("priority"),
            "timeline": {key: timeline.get(key) for key in TIMELINE_FIELDS},
        }
        context["outlet_events"][self.asset].extra = extra
        self.log.info(
            "Published %s=%s on asset %s (RayJob %s)",
            self.path_key,
            self.path,
            self.asset.name,
            extra["rayjob"],
        )
        return extra
