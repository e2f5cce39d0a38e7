"""The REST client's backfill creation against an api-server that fails the way Airflow on a busy SQLite
does. Airflow is played by an httpx transport here because a real one cannot be made to fail on cue;
the end-to-end walkthrough and ``make demo`` create their backfills through the same method against a
real api-server."""

from pathlib import Path

import httpx
import pytest

from devtools.airflow import Airflow

WINDOW = {"from_date": "2026-10-01T00:00:00Z", "to_date": "2026-10-03T00:00:00Z"}
BODY = {"dag_id": "text_classifier", **WINDOW, "max_active_runs": 3}


class FakeApiServer:
    """POST /api/v2/backfills answers from a script; GET lists the backfills 'made' so far."""

    def __init__(self, answers: list[tuple[int, bool]]):
        self.answers = answers  # (status, whether that attempt made the backfill)
        self.made: list[dict] = []
        self.posts = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            assert request.url.params["dag_id"] == BODY["dag_id"]
            return httpx.Response(200, json={"backfills": self.made, "total_entries": len(self.made)})
        status, makes = self.answers[self.posts]
        self.posts += 1
        if makes:
            self.made.append(
                {
                    "id": len(self.made) + 1,
                    "dag_id": BODY["dag_id"],
                    "from_date": "2026-10-01T00:00:00+00:00",
                    "to_date": "2026-10-03T00:00:00+00:00",
                    "completed_at": None,
                }
            )
        return httpx.Response(status, json=self.made[-1] if status == 200 else {"detail": "Database error"})


def client_for(server: FakeApiServer) -> Airflow:
    airflow = Airflow(url="http://airflow", home=Path("."), env={}, process=None, log_path=Path("log"))
    airflow.client = httpx.Client(base_url="http://airflow", transport=httpx.MockTransport(server))
    return airflow


def test_a_500_whose_attempt_made_the_backfill_is_not_sent_again():
    server = FakeApiServer([(500, True)])
    backfill, failures = client_for(server).create_backfill(BODY)
    assert (backfill["id"], failures, server.posts) == (1, 0, 1)
    assert len(server.made) == 1


def test_a_503_that_made_nothing_is_sent_again():
    server = FakeApiServer([(503, False), (200, True)])
    backfill, failures = client_for(server).create_backfill(BODY)
    assert (backfill["id"], failures, server.posts) == (1, 1, 2)


def test_a_finished_backfill_of_the_same_dates_is_not_taken_for_ours():
    server = FakeApiServer([(500, False), (200, True)])
    server.made.append({"id": 1, "dag_id": BODY["dag_id"], **WINDOW, "completed_at": "2026-10-04T00:00:00Z"})
    backfill, failures = client_for(server).create_backfill(BODY)
    assert (backfill["id"], failures, server.posts) == (2, 1, 2)


def test_a_conflict_on_the_first_attempt_is_the_callers_error():
    server = FakeApiServer([(409, False)])
    with pytest.raises(httpx.HTTPStatusError, match="409"):
        client_for(server).create_backfill(BODY)


def test_a_read_answered_500_is_asked_again():
    answers = iter([httpx.Response(500, json={"detail": "Database error"}), httpx.Response(200, json={})])
    airflow = client_for(FakeApiServer([]))
    airflow.client = httpx.Client(
        base_url="http://airflow", transport=httpx.MockTransport(lambda r: next(answers))
    )
    assert airflow.api("GET", "/dags/text_classifier").status_code == 200
