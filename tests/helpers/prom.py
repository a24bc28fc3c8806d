"""A real Prometheus server for tests: started on a free loopback port with a temporary config and
storage directory, scraping the targets a test names and evaluating the rule files it names.

    with running_prometheus(tmp_path, targets=["127.0.0.1:9464"], rule_files=[rules]) as prom:
        prom.wait_for_scrape()
        prom.query("sum(rate(gen_ai_client_operation_duration_seconds_count[1m]))")

or, in a test, the `make_prometheus` fixture (stopped at teardown):

    from helpers.prom import make_prometheus  # noqa: F401  (tests/ is on sys.path; pytest finds the fixture by name)

    def test_x(make_prometheus):
        prom = make_prometheus(targets=[...], rule_files=[...])

The binaries come from Debian (`bash tests/services.sh` installs them). When `prometheus` is
missing the helpers fail the test with that instruction: a missing tool is a broken setup, not a
reason to skip.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pytest
import yaml

# Prometheus cannot bind port 0 and report it: the one kind of caller free_port is kept for.
from helpers.ports import free_port

INSTALL_HINT = "run `bash tests/services.sh` (as root) to install it"


def require_binary(name: str, package: str) -> str:
    """Path of `name`, or fail the test saying how to install it."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` not found on PATH (Debian package `{package}`): {INSTALL_HINT}", pytrace=False)
    return path


def prometheus_binary() -> str:
    return require_binary("prometheus", "prometheus")


def promtool_binary() -> str:
    return require_binary("promtool", "prometheus")


def alertmanager_binary() -> str:
    # Debian names the binary prometheus-alertmanager; upstream tarballs name it alertmanager.
    path = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if path is None:
        pytest.fail(
            f"`prometheus-alertmanager` not found on PATH (Debian package `prometheus-alertmanager`): {INSTALL_HINT}",
            pytrace=False,
        )
    return path


class PromQueryError(AssertionError):
    """Prometheus answered a query with status "error" (bad PromQL, mostly)."""


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen
    workdir: Path
    config_path: Path
    log_path: Path
    targets: list[str] = field(default_factory=list)

    # --- HTTP API -----------------------------------------------------------------------------
    def api(
        self, path: str, params: dict[str, Any] | Sequence[tuple[str, Any]] | None = None, *, method: str = "GET"
    ) -> dict:
        """Call /api/v1/<path>; returns the decoded body whatever the status (see `query`)."""
        query = urllib.parse.urlencode(params or {}, doseq=True)
        url = f"{self.url}/api/v1/{path}"
        data = None
        if method == "POST":
            data = query.encode()
        elif query:
            url = f"{url}?{query}"
        req = urllib.request.Request(url, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # 400/422/503 carry a JSON error body
            body = exc.read()
            try:
                return json.loads(body)
            except ValueError:
                raise PromQueryError(f"{url}: HTTP {exc.code}: {body[:500]!r}") from None

    def query_raw(self, expr: str, at: float | None = None) -> dict:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.api("query", params, method="POST")

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """Instant query; the result list (vector/matrix elements; a scalar as one element).
        Raises PromQueryError if Prometheus rejects the expression."""
        body = self.query_raw(expr, at)
        if body.get("status") != "success":
            raise PromQueryError(f"{body.get('errorType')}: {body.get('error')}\n  expr: {expr}")
        data = body["data"]
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def value(self, expr: str, default: float | None = None) -> float | None:
        """The single value of a query that yields at most one element."""
        result = self.query(expr)
        if not result:
            return default
        assert len(result) == 1, f"{expr} returned {len(result)} series"
        return float(result[0]["value"][1])

    def series(self, match: str, start: float | None = None) -> list[dict]:
        params: list[tuple[str, Any]] = [("match[]", match)]
        if start is not None:
            params.append(("start", f"{start:.3f}"))
        body = self.api("series", params)
        if body.get("status") != "success":
            raise PromQueryError(f"{body.get('errorType')}: {body.get('error')}\n  match: {match}")
        return body["data"]

    def has_series(self, metric_name: str) -> bool:
        """Whether any series of this metric name was ever stored (since the server started)."""
        return bool(self.series(metric_name, start=0))

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        params = [("match[]", match)] if match else None
        body = self.api(f"label/{urllib.parse.quote(label)}/values", params)
        if body.get("status") != "success":
            raise PromQueryError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def rules(self) -> list[dict]:
        return self.api("rules")["data"]["groups"]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["data"]["alerts"]

    def active_targets(self) -> list[dict]:
        return self.api("targets")["data"]["activeTargets"]

    # --- waiting ------------------------------------------------------------------------------
    def wait_until(self, predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            if predicate():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"Prometheus: {what} not met within {timeout}s\n{self.log_tail()}")
            time.sleep(0.1)

    def wait_for_scrape(self, after: float | None = None, scrapes: int = 1, timeout: float = 20.0) -> None:
        """Wait until every target has been scraped successfully `scrapes` times after `after`
        (a time.time() value; default now), so queries at "now" see what the targets exported then."""
        since = time.time() if after is None else after
        interval = 1.0

        def done() -> bool:
            targets = self.active_targets()
            if len(targets) < len(self.targets):
                return False
            for t in targets:
                if t.get("health") != "up" or not t.get("lastScrape"):
                    return False
                last = _parse_rfc3339(t["lastScrape"])
                if last < since + (scrapes - 1) * interval:
                    return False
            return True

        self.wait_until(done, timeout, f"{scrapes} successful scrape(s) of {self.targets}")

    def wait_for_rules(self, timeout: float = 20.0) -> None:
        """Wait until every loaded rule has been evaluated at least once."""

        def done() -> bool:
            rules = [r for g in self.rules() for r in g["rules"]]
            return bool(rules) and all(
                r.get("lastEvaluation") and not r["lastEvaluation"].startswith("0001") for r in rules
            )

        self.wait_until(done, timeout, "first evaluation of every rule group")

    def wait_for_evaluations(
        self, after: float | None = None, evaluations: int = 1, interval: float = 1.0, timeout: float = 20.0
    ) -> None:
        """Wait until every loaded rule has been evaluated `evaluations` times after `after` (a
        time.time() value; default now) at the groups' `interval`: what a test waits for before it
        asserts that an alert did NOT fire."""
        since = time.time() if after is None else after

        def done() -> bool:
            rules = [r for g in self.rules() for r in g["rules"]]
            return bool(rules) and all(
                r.get("lastEvaluation")
                and not r["lastEvaluation"].startswith("0001")
                and _parse_rfc3339(r["lastEvaluation"]) >= since + (evaluations - 1) * interval
                for r in rules
            )

        self.wait_until(done, timeout, f"{evaluations} evaluation(s) of every rule group")

    # --- lifecycle ----------------------------------------------------------------------------
    def reload(self) -> None:
        """Re-read the config and rule files (POST /-/reload)."""
        req = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"Prometheus exited with status {self.process.returncode}\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def _parse_rfc3339(text: str) -> float:
    # e.g. 2026-12-02T13:40:01.123456789Z; Python's fromisoformat takes at most microseconds.
    from datetime import datetime

    head, _, frac = text.rstrip("Z").partition(".")
    ts = datetime.fromisoformat(head + "+00:00").timestamp()
    return ts + (float(f"0.{frac}") if frac else 0.0)


def write_config(
    path: Path,
    targets: Sequence[str],
    rule_files: Sequence[Path | str] = (),
    *,
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
    job: str = "llmwatch",
    alertmanagers: Sequence[str] = (),
    external_labels: dict[str, str] | None = None,
) -> None:
    config: dict[str, Any] = {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "evaluation_interval": evaluation_interval,
        },
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}] if targets else [],
        "rule_files": [str(Path(p).resolve()) for p in rule_files],
    }
    if external_labels:
        config["global"]["external_labels"] = dict(external_labels)
    if alertmanagers:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]}
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def start_prometheus(
    workdir: Path,
    targets: Sequence[str] = (),
    rule_files: Sequence[Path | str] = (),
    *,
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
    job: str = "llmwatch",
    alertmanagers: Sequence[str] = (),
    external_labels: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
    ready_timeout: float = 30.0,
) -> Prometheus:
    """Start Prometheus and wait until it is ready; the caller stops it (`Prometheus.stop`)."""
    binary = prometheus_binary()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "prometheus.yml"
    write_config(
        config_path,
        targets,
        rule_files,
        scrape_interval=scrape_interval,
        evaluation_interval=evaluation_interval,
        job=job,
        alertmanagers=alertmanagers,
        external_labels=external_labels,
    )
    check = subprocess.run([promtool_binary(), "check", "config", str(config_path)], capture_output=True, text=True)
    if check.returncode != 0:
        raise AssertionError(f"promtool check config failed:\n{check.stdout}{check.stderr}")
    last_error = ""
    for _ in range(3):  # a free port can be taken between free_port() and the bind: retry
        port = free_port()
        storage = Path(tempfile.mkdtemp(prefix="tsdb-", dir=workdir))
        log_path = workdir / f"prometheus-{port}.log"
        args = [
            binary,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={storage}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1d",
            "--log.level=warn",
            *extra_args,
        ]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir)
        prom = Prometheus(f"http://127.0.0.1:{port}", proc, workdir, config_path, log_path, list(targets))
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return prom
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.05)
        last_error = prom.log_tail()
        prom.stop()
        if "address already in use" not in last_error:
            break
    raise AssertionError(f"Prometheus did not become ready:\n{last_error}")


@contextlib.contextmanager
def running_prometheus(
    workdir: Path | None = None, targets: Sequence[str] = (), rule_files: Sequence[Path | str] = (), **kwargs: Any
) -> Iterator[Prometheus]:
    cleanup = None
    if workdir is None:
        cleanup = tempfile.TemporaryDirectory(prefix="llmwatch-prom-")
        workdir = Path(cleanup.name)
    prom = start_prometheus(workdir, targets, rule_files, **kwargs)
    try:
        yield prom
    finally:
        prom.stop()
        if cleanup is not None:
            cleanup.cleanup()


@pytest.fixture
def make_prometheus(tmp_path: Path) -> Iterator[Callable[..., Prometheus]]:
    """Factory fixture: make_prometheus(targets=[...], rule_files=[...], **start_prometheus kwargs)."""
    started: list[Prometheus] = []

    def factory(targets: Sequence[str] = (), rule_files: Sequence[Path | str] = (), **kwargs: Any) -> Prometheus:
        prom = start_prometheus(tmp_path / f"prometheus-{len(started)}", targets, rule_files, **kwargs)
        started.append(prom)
        return prom

    yield factory
    for prom in started:
        prom.stop()


def finite(result: list[dict]) -> list[float]:
    """The finite sample values of an instant-query result."""
    values = []
    for element in result:
        if "value" in element:
            values.append(float(element["value"][1]))
        for _, v in element.get("values", []):
            values.append(float(v))
    return [v for v in values if math.isfinite(v)]


__all__ = [
    "INSTALL_HINT",
    "PromQueryError",
    "Prometheus",
    "alertmanager_binary",
    "finite",
    "make_prometheus",
    "prometheus_binary",
    "promtool_binary",
    "require_binary",
    "running_prometheus",
    "start_prometheus",
    "write_config",
]
