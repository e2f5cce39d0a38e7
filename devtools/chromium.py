"""Headless Chromium for the browser tests and the UI benchmark: installed from Debian when absent,
driven with Selenium.

Chromium runs here as root and without network, hence ``--no-sandbox`` and the flags that stop its
background traffic (otherwise it floods the machine with refused connections), and a fresh profile per
browser. Timer throttling is off so that a page in a background window keeps polling like a visible one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PACKAGES = ("chromium", "chromium-driver")
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
    "--window-size=1440,1200",
)


def _installed() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


class ChromiumUnavailable(RuntimeError):
    """Chromium or its driver is missing and cannot be installed on this machine."""


def ensure_chromium() -> tuple[str, str]:
    """Paths of Chromium and its driver; apt-get installs them when missing (root on Debian/Ubuntu).
    ChromiumUnavailable, saying why, only where that is impossible."""
    found = _installed()
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise ChromiumUnavailable(
            "Chromium and chromedriver are not installed and cannot be installed here "
            f"(needs root and apt-get): install the Debian packages {' '.join(PACKAGES)}"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "-o", "DPkg::Lock::Timeout=600", "install", "-y", "--no-install-recommends", *PACKAGES]
    result = subprocess.run(install, capture_output=True, text=True, env=env, timeout=1200, check=False)
    if result.returncode != 0:  # a stale package index: refresh it once
        subprocess.run([apt, "update"], capture_output=True, text=True, env=env, timeout=600, check=False)
        result = subprocess.run(install, capture_output=True, text=True, env=env, timeout=1200, check=False)
    found = _installed()
    if found is None:
        raise ChromiumUnavailable(
            f"could not install {' '.join(PACKAGES)} with apt-get: {result.stderr[-500:]}"
        )
    return found


class Browser:
    """One Chromium (own profile) signed in to Airflow as one user."""

    def __init__(self, binaries: tuple[str, str], airflow_url: str, name: str) -> None:
        from selenium import webdriver

        options = webdriver.ChromeOptions()
        options.binary_location = binaries[0]
        self.profile = tempfile.mkdtemp(prefix=f"kueue-ui-{name}-")
        for flag in (*FLAGS, f"--user-data-dir={self.profile}"):
            options.add_argument(flag)
        self.driver = webdriver.Chrome(
            service=webdriver.ChromeService(executable_path=binaries[1]), options=options
        )
        self.url = airflow_url
        self.name = name
        self.frame_title: str | None = None

    def quit(self) -> None:
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)

    def wait(self, condition: Callable[[], Any], timeout: float = 60, what: str = "") -> Any:
        """Poll ``condition`` (exceptions count as "not yet") until truthy; fail naming ``what``."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = condition()
            except Exception as exc:  # noqa: BLE001 - the page is re-rendering; look again
                last_error, value = exc, None
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"{self.name}: not within {timeout:g}s: {what} (last error: {last_error})")

    def sign_in(self, username: str, password: str) -> None:
        """Through Airflow's own login page, as a person would."""
        from selenium.webdriver.common.by import By

        self.driver.get(f"{self.url}/auth/login?next=/")
        self.wait(lambda: self.driver.find_element(By.NAME, "username"), what="the login form")
        self.driver.find_element(By.NAME, "username").send_keys(username)
        self.driver.find_element(By.NAME, "password").send_keys(password)
        self.driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        self.wait(lambda: "/auth/login" not in self.driver.current_url, what=f"{username} signed in")

    def open_in_airflow(self, path: str, frame_title: str) -> None:
        """Open an Airflow UI page and enter the plugin's iframe once its script has rendered data."""

        self.driver.switch_to.default_content()
        self.driver.get(f"{self.url}{path}")
        self.frame_title = frame_title
        self.enter_frame()
        self.wait_rendered()

    def enter_frame(self) -> None:
        from selenium.webdriver.common.by import By

        self.driver.switch_to.default_content()
        frame = self.wait(
            lambda: self.driver.find_element(By.CSS_SELECTOR, f"iframe[title='{self.frame_title}']"),
            timeout=90,
            what=f"the {self.frame_title!r} iframe",
        )
        self.driver.switch_to.frame(frame)

    def open_bare(self, path: str) -> None:
        """Open one of the plugin's own pages directly (what the iframe loads)."""
        self.driver.switch_to.default_content()
        self.frame_title = None
        self.driver.get(f"{self.url}{path}")

    def wait_rendered(self, timeout: float = 90) -> None:
        self.wait(
            lambda: self.js("return document.body.dataset.version"), timeout, "the page rendered its data"
        )

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def text(self) -> str:
        return self.js("return document.body.innerText")

    def screenshot(self, path: Path) -> None:
        """The whole Airflow window (navigation and the plugin's iframe)."""
        self.driver.switch_to.default_content()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(path))
        if self.frame_title:
            self.enter_frame()
