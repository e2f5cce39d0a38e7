"""The queues page with the cluster gone, in a real browser: while one run holds the single queue and
another waits, the kubesim stops; the page says the cluster cannot be reached and keeps showing the last
state it had, with its age.

The package's last test (file order): it stops the package's kubesim, which the tests before it need.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import keep_request_log
from tests.browser.test_kueue_ui import (
    DAG,
    PAGE_ADMITTED,
    PAGE_PENDING,
    QUEUES_FRAME,
    QUEUES_PAGE,
    SCREENSHOTS,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def unreachable(ui, browsers, ui_kubesim, pytestconfig) -> dict:
    ops = browsers("ops")
    holder = ui.start_run(DAG, {"priority": "prod-priority", "epochs": 50})
    waiter = ui.start_run(DAG, {"priority": "dev-priority"})
    ops.open_in_airflow(QUEUES_PAGE, QUEUES_FRAME)
    ops.wait(lambda: holder in ops.js(PAGE_ADMITTED), 120, "the long prod run admitted")
    ops.wait(lambda: waiter in [row[2] for row in ops.js(PAGE_PENDING)], 120, "the dev run pending behind it")
    keep_request_log(pytestconfig, ui_kubesim)
    ui_kubesim.stop()
    ops.wait(lambda: ops.js("return document.getElementById('banner').dataset.state === 'unreachable'"), 90)
    seen = {
        "banner": ops.js("return document.getElementById('banner').innerText"),
        "admitted": ops.js(PAGE_ADMITTED),
        "pending": [row[2] for row in ops.js(PAGE_PENDING)],
        "holder": holder,
        "waiter": waiter,
    }
    ops.screenshot(SCREENSHOTS / "kueue-unreachable.png")
    return seen


def test_an_unreachable_cluster_is_said_and_the_last_state_kept(unreachable):
    seen = unreachable
    assert "cannot be reached" in seen["banner"] and "last known state" in seen["banner"]
    assert " ago)" in seen["banner"]  # the age of the state shown
    assert seen["holder"] in seen["admitted"] and seen["waiter"] in seen["pending"]
