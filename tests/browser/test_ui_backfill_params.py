"""The README's UI path for a backfill with params, clicked through Airflow 3.3.2's own dialog in Chromium:
Trigger → Backfill, a one-day date range, Epochs 2 in the form, "Override parameters on existing runs"
ticked, Run Backfill. The backfill carries the params and its run trains 2 epochs.

This module runs after test_kueue_ui.py (file order): Airflow runs one backfill of a DAG at a time, so it
first waits for the walkthrough's backfill of the same DAG to complete, and its own one-day backfill is
over when its run is.
"""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from tests.e2e.harness import wait_until
from tests.e2e.test_18_backfill_params import backfill_run, no_active_backfill

pytestmark = pytest.mark.timeout(900)

DAG = "text_classifier_finetune"
DAY = "2026-09-14"
"""A day no other backfill of this package covers."""


def visible_dialog(browser):
    """The topmost open dialog or popover (Chakra keeps closed ones in the page, hidden)."""
    return [
        node for node in browser.driver.find_elements(By.CSS_SELECTOR, "[role=dialog]") if node.is_displayed()
    ][-1]


def click_text(browser, within, text: str) -> None:
    """Click the element that shows ``text`` (a label, a radio's text, a section's title, a button)."""
    browser.wait(
        lambda: within.find_element(By.XPATH, f".//*[normalize-space(text())={text!r}]"), 60, repr(text)
    ).click()


def pick(browser, picker, day: str, time_of_day: str) -> None:
    """A date picker of the dialog: open it, type the date and the time into its fields, close it."""
    picker.click()
    popover = browser.wait(
        lambda: (
            visible_dialog(browser)
            if "YYYY/MM/DD" in visible_dialog(browser).get_attribute("innerHTML")
            else None
        ),
        30,
        "the date picker",
    )
    date_field, time_field = popover.find_elements(By.TAG_NAME, "input")[:2]
    date_field.send_keys(day.replace("-", "/"))
    time_field.send_keys(Keys.CONTROL, "a")
    time_field.send_keys(time_of_day)
    time_field.send_keys(Keys.ESCAPE)


def test_the_readmes_ui_backfill_path_trains_with_the_chosen_epochs(ui, browsers):
    no_active_backfill(ui)
    admin = browsers("admin")
    admin.driver.switch_to.default_content()
    admin.driver.get(f"{ui.airflow.url}/dags/{DAG}")
    trigger = admin.wait(
        lambda: [b for b in admin.driver.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Trigger"],
        90,
        "the Trigger button",
    )
    trigger[0].click()
    dialog = admin.wait(lambda: visible_dialog(admin), 60, "the trigger dialog")
    click_text(admin, dialog, "Backfill")
    admin.wait(lambda: "Run Backfill" in visible_dialog(admin).text, 30, "the backfill form")
    dialog = visible_dialog(admin)

    start, end = dialog.find_elements(By.CSS_SELECTOR, "[data-testid=datetime-input]")[:2]
    pick(admin, start, DAY, "00:00")
    pick(admin, end, DAY, "23:59")
    admin.wait(lambda: "1 run will be triggered" in visible_dialog(admin).text, 60, "the dialog's dry run")
    dialog = visible_dialog(admin)
    epochs = dialog.find_element(By.NAME, "element_epochs")
    if not epochs.is_displayed():
        click_text(admin, dialog, "Training")
        admin.wait(epochs.is_displayed, 30, "the Epochs field")
    epochs.send_keys(Keys.CONTROL, "a")
    epochs.send_keys("2")
    click_text(admin, dialog, "Override parameters on existing runs")
    [run_button] = [
        b for b in dialog.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Run Backfill"
    ]
    run_button.click()

    def made() -> dict | None:
        response = ui.airflow.api("GET", "/backfills", params={"dag_id": DAG})
        found = (
            [b for b in response.json()["backfills"] if b["from_date"].startswith(DAY)]
            if response.is_success
            else []
        )
        return found[0] if found else None

    backfill = wait_until(made, timeout=60, what="the backfill the dialog made")
    assert backfill["dag_run_conf"]["epochs"] == 2, backfill
    run = backfill_run(ui, DAY)
    assert run["conf"]["epochs"] == 2, run

    finished = ui.wait_run(DAG, run["dag_run_id"], timeout=600)

    assert finished["state"] == "success", ui.all_logs(DAG, run["dag_run_id"])[-3000:]
    driver = ui.task_log(DAG, run["dag_run_id"], "wait")
    assert "epoch 2/2" in driver and "epoch 3/3" not in driver, driver[-2000:]
    assert "has no conf" not in ui.task_log(DAG, run["dag_run_id"], "submit")
