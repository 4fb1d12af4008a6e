"""`sanctuary-local serve` in a real browser: Debian's Chromium driven by chromedriver through
selenium, with JavaScript as the page has it (none: the CSP allows no script). Open the page,
submit an example claim, wait (meta refresh) for the verdict, follow an evidence link to
its source and find the snippet highlighted at its exact span, save a screenshot; markup
in a claim never runs; a check deleted with its button and the confirmation page's. The stand-in LLM here; the real `cpu-fast` model in the `slow` test,
whose screenshot (SERVE_SCREENSHOT=docs/serve.png) is the one in docs/serve.md (SERVE_URL:
against a server already running, e.g. the one the docs' curl examples were made with).
Skipped without chromium, chromedriver or selenium."""

from __future__ import annotations

import os
import re
import shutil
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sanctuary_local.records import LABELS
from tests.support.serve_support import EVIL, KEEP_SNIPPETS, Server, build_index, many_checks
from tests.support.shared_runs import TINY_TRAINED

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401
except ImportError:  # the dev extra has it
    selenium = None

pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None or selenium is None,
                                reason="needs chromium, chromium-driver (apt-get install chromium chromium-driver; "
                                       ".ci/run does) and selenium (the dev extra)")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1500", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(flag)
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium must not look for drivers online
    driver = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(300)  # a loaded machine (a full test run) is slow to answer
    try:
        yield driver
    finally:
        driver.quit()


def submit(driver: Any, base: str, claim: str, timeout: float = 300) -> str:
    """Type ``claim`` into the page's form, press Check; the check's page URL once the
    browser shows it. ``click`` waits only for a navigation chromedriver has seen start, and
    Chrome submits a form in a task of its own: on a loaded machine the click can return
    first, with the home page's URL still current (a full test run read ``/`` that way, then
    found the verdict on the check page). So wait for the answer (a 303 to ``/checks/ID``);
    a refusal (422, 429, 403: shown at the POST's own URL, ``/checks``) fails at once."""
    from selenium.webdriver.common.by import By

    driver.get(base + "/")
    box = driver.find_element(By.ID, "claim")
    box.clear()
    box.send_keys(claim)
    driver.find_element(By.ID, "check").click()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        url = driver.current_url
        path = urllib.parse.urlsplit(url).path
        if re.fullmatch(r"/checks/\d+", path):
            return url
        assert path == "/", f"the form was answered at {url}: {driver.page_source[-2000:]}"
        time.sleep(0.2)
    raise AssertionError(f"the form's answer did not arrive in {timeout} s: {driver.current_url}")


def wait_for_verdict(driver: Any, timeout: float) -> str:
    """The verdict once the page (refreshing itself every 2 s) shows it."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = driver.find_elements(By.ID, "verdict") or driver.find_elements(By.ID, "failed")
            if found:
                assert found[0].get_attribute("id") == "verdict", found[0].text
                return found[0].text
        except StaleElementReferenceException:  # the refresh replaced the page meanwhile
            pass
        time.sleep(0.5)
    raise AssertionError(f"no verdict after {timeout} s: {driver.page_source[-2000:]}")


def follow_evidence(driver: Any) -> tuple[str, str]:
    """Click the first "show in its source" link; (the snippet on the check page, the marked span there)."""
    from selenium.webdriver.common.by import By

    from selenium.webdriver.support.wait import WebDriverWait

    section = driver.find_element(By.CSS_SELECTOR, "section.evidence")
    snippet = section.find_element(By.TAG_NAME, "mark").text
    section.find_element(By.CSS_SELECTOR, "a.in-source").click()
    # as in ``submit``: the click may return before the source page is shown
    WebDriverWait(driver, 300, poll_frequency=0.2).until(lambda d: "/evidence/" in d.current_url,
                                                         f"the evidence link did not open: {driver.current_url}")
    mark = driver.find_element(By.CSS_SELECTOR, "mark#span")
    assert driver.current_url.endswith("#span") and mark.is_displayed()
    return snippet, mark.text


def check_flow(driver: Any, server: Server, claim: str, shot: Path, timeout: float) -> tuple[str, float]:
    base = f"http://127.0.0.1:{server.port}"
    t = time.monotonic()
    url = submit(driver, base, claim)
    print(f"the check's page was shown {time.monotonic() - t:.1f} s after the home page was asked for")
    verdict = wait_for_verdict(driver, timeout)
    took = time.monotonic() - t
    assert verdict in LABELS
    from selenium.webdriver.common.by import By

    claim_shown = driver.find_element(By.ID, "claim").text
    assert claim_shown == claim
    snippet, marked = follow_evidence(driver)
    assert marked and marked == snippet  # the span highlighted in the source is the snippet
    shot.parent.mkdir(parents=True, exist_ok=True)
    driver.get(url)
    assert driver.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return verdict, took


def test_check_a_claim_in_the_browser(browser: Any, tmp_path: Path, repo_dir: Path) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    index = build_index(repo_dir / "examples" / "corpus", tmp_path / "index")
    server = Server(index, tmp_path / "data", *KEEP_SNIPPETS)
    try:
        server.wait_ready()
        claim = orjson.loads((repo_dir / "examples" / "claims.json").read_bytes())[0]["claim"]
        check_flow(browser, server, claim, tmp_path / "serve.png", timeout=300)
        submit(browser, f"http://127.0.0.1:{server.port}", EVIL)  # markup typed in: shown, never run
        wait_for_verdict(browser, 300)
        assert browser.title != "pwned" and EVIL in browser.page_source.replace("&lt;", "<").replace("&gt;", ">")
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text
    finally:
        server.close()


class _Running:
    """A server someone started already (``SERVE_URL``): its port, nothing to stop."""

    def __init__(self, url: str) -> None:
        self.port = int(url.rstrip("/").rsplit(":", 1)[1])

    def close(self) -> None:
        pass


@pytest.mark.slow
def test_real_model_check_in_the_browser(browser: Any, tmp_path: Path, repo_dir: Path) -> None:
    """The `cpu-fast` models (Qwen2.5-Coder-0.5B for stage 1, the trained verdict) on one
    example claim, end to end: with the test profile's short generations
    (tests/data/tiny_cpu_trained.toml, based on cpu-fast) unless
    ``SERVE_PROFILE`` names another; with ``SERVE_URL`` against a server already running
    (docs/serve.png: `serve --profile cpu`, the default, its models loaded once; docs/serve.md, Tests)."""
    if url := os.environ.get("SERVE_URL"):
        server: Any = _Running(url)
    else:
        index = build_index(repo_dir / "examples" / "corpus", tmp_path / "index")
        server = Server(index, tmp_path / "data", profile=os.environ.get("SERVE_PROFILE") or TINY_TRAINED, real_model=True)
    try:
        if not url:
            server.wait_ready(timeout=900)
        shot = Path(os.environ.get("SERVE_SCREENSHOT") or tmp_path / "serve.png")
        claim = "Water boils at 70 degrees Celsius on the summit of Mount Everest."
        verdict, took = check_flow(browser, server, claim, shot.resolve(), timeout=1200)
        print(f"models loaded: Check to verdict {took:.1f} s in the browser ({verdict})")
    finally:
        server.close()


#: Right-to-left text as an analyst may paste it: Hebrew, a question mark, and a claim ending
#: in an unclosed RIGHT-TO-LEFT OVERRIDE (U+202E) that would reverse whatever follows it.
RTL_CLAIM = "המים רותחים ב-70 מעלות בפסגת האוורסט?"
RLO_CLAIM = "Water boils at 70 degrees \u202eon Everest"


def test_right_to_left_claims_are_isolated(browser: Any, tmp_path: Path, repo_dir: Path) -> None:
    """A claim's text is shown in its own direction and cannot reorder the page around it:
    a Hebrew claim reads right to left (its "?" at its left end), and an unclosed RLO in a
    claim stops at the claim's end. Before, the claim inherited the page's left-to-right
    direction, and on the home page the RLO reversed the stage names after the running claim
    (they were drawn to its left, their letters backwards)."""
    from selenium.webdriver.common.by import By

    index = build_index(repo_dir / "examples" / "corpus", tmp_path / "index")
    server = Server(index, tmp_path / "data", latency_s=60)  # the first check runs on; the second waits
    try:
        server.wait_ready()
        running = server.request("POST", "/api/checks", {"claim": RLO_CLAIM}).json()["id"]
        waiting = server.request("POST", "/api/checks", {"claim": RTL_CLAIM}).json()["id"]
        while server.request("GET", f"/api/checks/{running}").json()["status"] != "running":
            time.sleep(0.1)
        base = f"http://127.0.0.1:{server.port}"

        def direction(el: Any) -> str:
            return browser.execute_script("return getComputedStyle(arguments[0]).direction", el)

        browser.get(f"{base}/checks/{waiting}")
        claim = browser.find_element(By.ID, "claim")
        assert claim.text == RTL_CLAIM and direction(claim) == "rtl"

        browser.get(base + "/")
        link = browser.find_element(By.CSS_SELECTOR, "#running a")
        first_stage = browser.find_element(By.CSS_SELECTOR, "#running .stage")
        right_end = link.location["x"] + link.size["width"]
        assert first_stage.location["x"] >= right_end - 1, (  # after the claim, where it is in the text
            f"the claim's RLO moved the stages: link ends at x={right_end}, first stage at x={first_stage.location['x']}")
        queued = browser.find_element(By.CSS_SELECTOR, f'#waiting a[href="/checks/{waiting}"]')
        assert direction(queued) == "rtl"
        history = browser.find_element(By.CSS_SELECTOR, f'#history a[href="/checks/{waiting}"]')
        assert direction(history) == "rtl"
    finally:
        server.close()


def test_delete_a_check_in_the_browser(browser: Any, tmp_path: Path, repo_dir: Path) -> None:
    """The check page's Delete, then the confirmation page's button (the pages have no
    script); the check's folder is gone and its page is Not found."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    data = tmp_path / "data"
    server = Server(build_index(repo_dir / "examples" / "corpus", tmp_path / "index"), data)
    try:
        server.wait_ready()
        url = submit(browser, f"http://127.0.0.1:{server.port}", "Water boils at 70 degrees Celsius on Everest.")
        wait_for_verdict(browser, 300)
        check_id = url.rstrip("/").rsplit("/", 1)[1]
        browser.find_element(By.ID, "delete").click()
        WebDriverWait(browser, 300, poll_frequency=0.2).until(lambda d: d.find_elements(By.ID, "confirm-delete"))
        assert (data / "checks" / check_id).is_dir()  # asked, not yet deleted
        browser.find_element(By.ID, "confirm-delete").click()
        WebDriverWait(browser, 300, poll_frequency=0.2).until(lambda d: d.find_elements(By.ID, "deleted"))
        assert not (data / "checks" / check_id).exists() and server.request("GET", "/api/checks").json()["checks"] == []
        browser.get(url)
        assert browser.find_element(By.TAG_NAME, "h1").text == "Not found"
    finally:
        server.close()


def test_the_older_checks_link_pages_through_the_history(browser: Any, tmp_path: Path, repo_dir: Path) -> None:
    """With more checks than the home page lists, its "Older checks" link shows the rest
    (and "Newest checks" leads back); before, the oldest ones could not be reached from the page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    from sanctuary_local.serve.paging import HISTORY_ROWS

    ids = many_checks(tmp_path / "data", HISTORY_ROWS + 3)
    server = Server(build_index(repo_dir / "examples" / "corpus", tmp_path / "index"), tmp_path / "data")
    base = f"http://127.0.0.1:{server.port}"

    def rows() -> list[str]:
        return [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#history tr td:first-child")]

    try:
        browser.get(base + "/")
        assert rows() == ids[::-1][:HISTORY_ROWS] and not browser.find_elements(By.ID, "newest")
        browser.find_element(By.ID, "older").click()
        WebDriverWait(browser, 300, poll_frequency=0.2).until(lambda d: "before=" in d.current_url)
        assert rows() == ids[2::-1]  # the three oldest
        assert browser.find_element(By.ID, "history-range").text == (
            f"Checks {HISTORY_ROWS + 1}–{HISTORY_ROWS + 3} of {HISTORY_ROWS + 3}, newest first.")
        assert not browser.find_elements(By.ID, "older")
        browser.find_element(By.ID, "newest").click()
        WebDriverWait(browser, 300, poll_frequency=0.2).until(lambda d: "before=" not in d.current_url)
        assert rows()[0] == ids[-1]
    finally:
        server.close()
