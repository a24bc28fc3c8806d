"""`llmwatch ui` in a real Chromium: the printed link, the filter form to a sample's page, and the
URL a Grafana data link of the shipped quality dashboard opens, and from a sample to its
conversation's turns, with no failed request, no console error and nothing fetched from anywhere
but the app."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from helpers.browser import browser_fixture, console_errors, failed_requests, network_events, requested_urls, screenshot  # noqa: F401
from helpers.ui_app import UiServer
from helpers.ui_data import HOSTILE_TURN, START, conversation_id, generate, generate_conversations
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ui(tmp_path: Path):
    data = tmp_path / "llmwatch-data"
    generate(data, 400)
    server = UiServer(data, "--auth", "token")
    yield server
    server.stop()


def clean(browser) -> list[dict]:
    events = network_events(browser)
    assert failed_requests(events) == [] and console_errors(browser) == []
    assert all(u.startswith(("http://127.0.0.1:", "data:")) for u in requested_urls(events))
    return events


def grafana_link(panel_title: str) -> str:
    """The committed quality dashboard's data link on `panel_title`, its URL template."""
    dashboard = json.loads((ROOT / "dashboards" / "llmwatch-quality.json").read_text())
    for panel in dashboard["panels"]:
        if panel["title"] == panel_title and panel["type"] != "row":
            return panel["fieldConfig"]["defaults"]["links"][0]["url"]
    raise AssertionError(f"no panel {panel_title!r}")


def test_from_the_filter_form_to_a_sample_and_from_a_grafana_data_link(browser, ui: UiServer, tmp_path: Path):
    browser.get(ui.link)  # the printed link: the token becomes a cookie and leaves the address bar
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "count"))
    assert browser.current_url == f"{ui.base}/samples" and "token" not in browser.current_url
    clean(browser)

    Select(browser.find_element(By.ID, "f-model_version")).select_by_value("B")
    Select(browser.find_element(By.ID, "f-check")).select_by_value("min_length")
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("fail")
    browser.find_element(By.ID, "apply").click()
    WebDriverWait(browser, 30).until(lambda d: "outcome=fail" in d.current_url)
    filtered = int(browser.find_element(By.CSS_SELECTOR, "#count strong").text.replace(",", ""))
    ids = [a.get_attribute("href").rsplit("/", 1)[1] for a in browser.find_elements(By.CSS_SELECTOR, "a.sample-link")]
    assert 10 < filtered == len(ids)
    rows = browser.find_elements(By.CSS_SELECTOR, "#samples tr.sample")
    assert all("min_length" in r.text and " B " in f" {r.text} " for r in rows)
    clean(browser)
    screenshot(browser, "ui-samples.png", tmp_path)

    browser.find_elements(By.CSS_SELECTOR, "a.sample-link")[0].click()
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "checks"))
    assert browser.current_url == f"{ui.base}/samples/{ids[0]}"
    verdicts = {
        tr.find_elements(By.TAG_NAME, "td")[0].text: tr.find_elements(By.TAG_NAME, "td")[2].text
        for tr in browser.find_elements(By.CSS_SELECTOR, "#checks tr.check")
    }
    assert verdicts["min_length"] == "fail" and set(verdicts) == {"min_length", "not_empty", "refusal"}
    facts = browser.find_element(By.ID, "facts").text
    assert re.search(r"latency\s+[\d,]+ ms", facts) and re.search(r"cost\s+\$0\.\d{6}", facts)
    assert browser.find_element(By.ID, "answer").text.strip()
    clean(browser)
    screenshot(browser, "ui-sample.png", tmp_path)

    # A click on the "Pass rate per check" series min_length, version B, in Grafana over one day.
    frm = int(START.timestamp() * 1000)
    to = int((START + timedelta(days=1)).timestamp() * 1000)
    url = (
        grafana_link("Pass rate per check")
        .replace("${llmwatch_ui_url}", ui.base)
        .replace("${version:percentencode}", "B")
        .replace("${__field.labels.check:percentencode}", "min_length")
        .replace("${__from}", str(frm))
        .replace("${__to}", str(to))
    )
    assert "${" not in url
    browser.get(url)
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "count"))
    linked = [
        a.get_attribute("href").rsplit("/", 1)[1] for a in browser.find_elements(By.CSS_SELECTOR, "a.sample-link")
    ]
    assert linked == ids  # the same samples as the form found, newest first
    # With "All" versions selected Grafana sends ".*": every version's failures.
    browser.get(url.replace("model_version=B", "model_version=.*"))
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "count"))
    assert int(browser.find_element(By.CSS_SELECTOR, "#count strong").text.replace(",", "")) > filtered
    clean(browser)

    browser.get(f"{ui.base}/versions")
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "pass-rates"))
    assert "min_length" in browser.find_element(By.ID, "pass-rates").text
    clean(browser)
    screenshot(browser, "ui-versions.png", tmp_path)


def test_from_a_sample_to_its_conversation_and_its_turns_in_order(browser, tmp_path: Path):
    data = tmp_path / "llmwatch-data"
    generate(data, 30, pairs=0)
    # Version B's conversation 2 loses min_length from turn 3 on; its lines lie shuffled in the file,
    # and its second user message is markup.
    generate_conversations(data, {1: ("A", 3), 2: ("B", 4)})
    server = UiServer(data, "--auth", "token")
    try:
        browser.get(server.link)
        WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "count"))
        browser.get(f"{server.base}/samples/cnv-002-03")
        WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "conversation-link"))
        facts = browser.find_element(By.ID, "facts").text
        assert re.search(rf"conversation\s+{conversation_id(2)}, turn 3 of 4", facts), facts
        clean(browser)

        browser.find_element(By.ID, "conversation-link").click()
        WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "turns"))
        assert browser.current_url == f"{server.base}/conversations/{conversation_id(2)}"
        rows = browser.find_elements(By.CSS_SELECTOR, "#turns tr.turn")
        cells = [r.find_elements(By.TAG_NAME, "td") for r in rows]
        assert [c[0].text for c in cells] == ["1", "2", "3", "4"]
        # Each turn's own user message; the second is markup, shown as text (clean(): no image fetched, no script run).
        assert [c[3].text for c in cells] == [
            "Conversation 2, turn 1: and then what?", HOSTILE_TURN,
            "Conversation 2, turn 3: and then what?", "Conversation 2, turn 4: and then what?",
        ]  # fmt: skip
        assert [("min_length: pass" in c[5].text) for c in cells] == [True, True, False, False]
        assert all(c[4].text.startswith(f"Answer {k} of 2:") for k, c in enumerate(cells, start=1))
        clean(browser)
        screenshot(browser, "ui-conversation.png", tmp_path)

        # Back to a turn's own page, and on to the list of conversations, the decaying one first.
        cells[2][1].find_element(By.TAG_NAME, "a").click()
        WebDriverWait(browser, 30).until(lambda d: d.current_url.endswith("/samples/cnv-002-03"))
        browser.find_element(By.ID, "nav-conversations").click()
        WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "conversations"))
        listed = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#conversations a.conversation-link")]
        assert listed == [conversation_id(2), conversation_id(1)]
        clean(browser)
    finally:
        server.stop()


def test_on_a_phone_a_wide_table_scrolls_inside_itself_and_the_page_fits_the_screen(browser, ui: UiServer):
    # At 390 px the samples and versions tables pushed the page to 1,262 px: the header and text
    # wrapped at the screen's width while a drift table's verdict column sat off it.
    browser.get(ui.link)
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "count"))
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}
    )
    try:
        for path in ("/samples", "/versions", "/shadow"):
            browser.get(ui.base + path)
            WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "table.list"))
            width, page = browser.execute_script("return [window.innerWidth, document.documentElement.scrollWidth]")
            assert page <= width == 390, (path, page, width)
            table = browser.find_element(By.CSS_SELECTOR, "table.list")
            assert browser.execute_script("return getComputedStyle(arguments[0]).overflowX", table) == "auto"
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
