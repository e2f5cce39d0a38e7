"""Airflow's own backfill dialog, in a real browser, as the README tells a user to use it: the chosen
Epochs reach the RayJob, and a number out of range is kept as typed (to be refused), not clamped.

Runs before test_kueue_ui.py in this package's Airflow (file order), and leaves its backfill completed
and the single queue empty, so the walkthrough there starts as it would alone.
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import wait_until

pytestmark = pytest.mark.timeout(600)

DAG = "text_classifier_finetune"
DAY = "2026/10/12"
DAY_ISO = "2026-10-12"


def button(admin, text: str):
    from selenium.webdriver.common.by import By

    return admin.wait(
        lambda: next(b for b in admin.driver.find_elements(By.TAG_NAME, "button") if b.text.strip() == text),
        90,
        f"the {text!r} button",
    )


def pick_date(admin, box_index: int, day: str) -> None:
    """Open the dialog's From (0) or To (1) picker and type the day into its Date field."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver = admin.driver
    boxes = admin.wait(
        lambda: driver.find_elements(By.XPATH, "//*[text()='Select date and time']"), 30, "the date pickers"
    )
    boxes[0 if box_index == 0 or len(boxes) == 1 else box_index].click()
    field = admin.wait(
        lambda: next(i for i in driver.find_elements(By.CSS_SELECTOR, "input[placeholder='YYYY/MM/DD']")
                     if i.is_displayed()),
        30,
        "the Date field",
    )  # fmt: skip
    field.send_keys(day)
    field.send_keys(Keys.ESCAPE)


def epochs_field(admin):
    from selenium.webdriver.common.by import By

    return admin.driver.find_element(By.NAME, "element_epochs")


def type_epochs(admin, value: str) -> str:
    """Type into the Epochs field as a person does, leave it, and return what it then holds."""
    from selenium.webdriver.common.keys import Keys

    field = epochs_field(admin)
    field.click()
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(value)
    field.send_keys(Keys.TAB)
    return epochs_field(admin).get_attribute("value")


def test_the_backfill_dialog_with_override_ticked_trains_with_the_chosen_epochs(browsers, ui):
    from selenium.webdriver.common.by import By

    admin = browsers("admin")
    driver = admin.driver
    driver.switch_to.default_content()
    driver.get(f"{ui.airflow.url}/dags/{DAG}")
    button(admin, "Trigger").click()
    admin.wait(lambda: driver.find_element(By.XPATH, "//*[text()='Backfill']"), 30, "the dialog").click()

    # Priority and queue are in view at once; Epochs is in the Training section.
    assert driver.find_element(By.XPATH, "//*[text()='LocalQueue']").is_displayed()
    pick_date(admin, 0, DAY)
    pick_date(admin, 1, DAY)
    button(admin, "Training").click()
    admin.wait(lambda: epochs_field(admin).is_displayed(), 30, "the Epochs field")
    # Out of range, the form keeps what was typed (Airflow refuses it on Run) instead of clamping to 50.
    assert type_epochs(admin, "100") == "100"
    assert type_epochs(admin, "2") == "2"
    driver.find_element(By.XPATH, "//*[text()='Override parameters on existing runs']").click()
    run_button = button(admin, "Run Backfill")
    admin.wait(lambda: run_button.is_enabled(), 60, "the dry run to find the day's run")
    run_button.click()

    def made():
        response = ui.airflow.api("GET", "/backfills", params={"dag_id": DAG})
        return next((b for b in response.json()["backfills"] if b["from_date"].startswith(DAY_ISO)), None)

    backfill = wait_until(made, timeout=60, what="the dialog's backfill")
    assert backfill["dag_run_conf"]["epochs"] == 2, backfill

    def run_of_the_day():
        runs = [
            r for r in ui.runs(DAG, run_type="backfill") if (r.get("logical_date") or "").startswith(DAY_ISO)
        ]
        return runs[0] if runs else None

    run = wait_until(run_of_the_day, timeout=60, what="the backfill's run")
    assert run["conf"]["epochs"] == 2
    assert ui.wait_run(DAG, run["dag_run_id"], timeout=300)["state"] == "success"
    driver_log = ui.task_log(DAG, run["dag_run_id"], "wait")
    assert "epoch 2/2" in driver_log and "epoch 3/3" not in driver_log, driver_log[-2000:]

    def completed() -> bool:
        response = ui.airflow.api("GET", "/backfills", params={"dag_id": DAG})
        return all(b["completed_at"] for b in response.json()["backfills"])

    wait_until(completed, timeout=120, what="the backfill to complete")
