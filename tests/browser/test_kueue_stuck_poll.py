"""A Kueue page whose poll gets no answer, in a real browser: Chromium holds the page's requests to the
queues API (the DevTools protocol's request interception, as a proxy or a stalled API server worker
would), the page says so after its answer timeout and recovers by itself once answers come again: a
stuck request never freezes the page on an old state."""

from __future__ import annotations

import pytest

from tests.browser.test_kueue_ui import QUEUES_FRAME, QUEUES_PAGE

pytestmark = pytest.mark.timeout(300)

BANNER = "const b = document.getElementById('banner'); return b.hidden ? '' : b.innerText"


def test_a_poll_without_an_answer_is_dropped_said_and_asked_again(browsers):
    ops = browsers("ops")
    ops.open_in_airflow(QUEUES_PAGE, QUEUES_FRAME)
    ops.driver.execute_cdp_cmd("Fetch.enable", {"patterns": [{"urlPattern": "*/api/v1/queues*"}]})
    try:
        said = ops.wait(lambda: ops.js(BANNER), 60, "the page saying its poll got no answer")
    finally:
        ops.driver.execute_cdp_cmd("Fetch.disable", {})
    assert said == "Airflow's API server did not answer within 20 s; asking again.", said
    ops.wait(lambda: not ops.js(BANNER), 30, "the banner gone once the API answers again")
