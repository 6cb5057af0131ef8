"""The audit page in headless Chromium: sign in, filter, and find a known intercept with its decoy."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.gateway.conftest import Gateway

pytestmark = pytest.mark.browser

CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1500,1000",
)


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    with tempfile.TemporaryDirectory(prefix="rlguard-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in (*CHROME_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
        driver.set_page_load_timeout(60)
        try:
            yield driver
        finally:
            driver.quit()


def _apply(browser: webdriver.Chrome, category: str) -> None:
    """Submit the filter form and wait for the filtered page (a click does not wait for it)."""
    browser.find_element(By.ID, "apply").click()
    WebDriverWait(browser, 30).until(EC.url_contains(f"category={category}"))
    WebDriverWait(browser, 30).until(EC.presence_of_element_located((By.ID, "intercepts")))


def test_sign_in_filter_and_see_the_decoy(gateway: Gateway, browser: webdriver.Chrome, tmp_path) -> None:
    ep = gateway.new_episode(policy_version="v-browser")
    assert ep.call("bash", command="echo fine").status_code == 200
    cheat = ep.call("bash", command="git log --all --oneline")
    assert cheat.status_code == 200
    ep.call("read_file", path="/reference/solution.py")

    browser.get(f"{gateway.url}/audit")
    browser.find_element(By.ID, "token").send_keys(gateway.admin_token)
    browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
    WebDriverWait(browser, 30).until(EC.presence_of_element_located((By.ID, "rate-chart")))
    assert browser.find_element(By.ID, "rate-chart").is_displayed()
    assert "v-browser" in browser.find_element(By.ID, "rate-chart").get_attribute("innerHTML")

    Select(browser.find_element(By.ID, "f-category")).select_by_value("git_history_leak")
    browser.find_element(By.ID, "f-episode").send_keys(ep.id)
    _apply(browser, "git_history_leak")
    rows = browser.find_elements(By.CSS_SELECTOR, "#intercepts tr.intercept")
    assert len(rows) == 1
    row = rows[0]
    assert row.get_attribute("data-category") == "git_history_leak"
    assert "git log --all" in row.text and "decoy" in row.text
    shown = row.find_element(By.CSS_SELECTOR, ".decoy-output pre").get_attribute("textContent")
    assert shown == cheat.json()["output"]  # exactly what the agent saw

    Select(browser.find_element(By.ID, "f-category")).select_by_value("hidden_test_access")
    _apply(browser, "hidden_test_access")
    rows = browser.find_elements(By.CSS_SELECTOR, "#intercepts tr.intercept")
    assert [r.get_attribute("data-category") for r in rows] == ["hidden_test_access"]
    assert "/reference/solution.py" in rows[0].text

    Select(browser.find_element(By.ID, "f-category")).select_by_value("sandbox_escape")
    _apply(browser, "sandbox_escape")
    assert browser.find_elements(By.ID, "no-intercepts")

    browser.get(f"{gateway.url}/audit?episode_id={ep.id}")
    shot = os.environ.get("RLGUARD_AUDIT_SCREENSHOT") or str(tmp_path / "audit.png")
    assert browser.save_screenshot(shot)
