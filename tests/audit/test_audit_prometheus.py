"""The shipped alerting rules (docs/examples/rkdet-audit-alerts.yml) against the real Prometheus server and
node_exporter (Debian packages `prometheus`, `prometheus-node-exporter`; .ci/setup installs them).

The serving app (the audited RKNNLite over the example app's emulated runtime, a test double named as
such) writes its textfile into a temporary folder; node_exporter's textfile collector serves that folder
on a free loopback port; Prometheus (own config, own data folder, 1 s scrape and evaluation) loads the
rules file itself and scrapes it. A canary failure planted in the runtime must fire `RkdetCanaryFailure`
through Prometheus' HTTP API. Both servers are this test's own children, found by their handles only.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest

from rkdet.onboard.audit import AuditSettings, RKNNLite
from rkdet.onboard.audit_prom import COUNTERS, PROM_FILE
from rkdet.onboard.audit_watch import Canary

from audit_app import APP_MODULE, BUILD, REPO

RULES = REPO / "docs" / "examples" / "rkdet-audit-alerts.yml"
WAIT_S = 60.0  # every wait below is bounded by this
T = TypeVar("T")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not installed; run .ci/setup (Debian packages prometheus, prometheus-node-exporter)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:  # loopback only: our own children
        return json.loads(response.read().decode())


def _until(what: str, probe: Callable[[], T | None], procs: list[subprocess.Popen]) -> T:
    """Poll `probe` until it returns something, at most WAIT_S; a child that died fails at once."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"{p.args[0]} exited with {p.returncode} while waiting for {what}")
        try:
            got = probe()
        except OSError:  # not listening yet
            got = None
        if got is not None:
            return got
        time.sleep(0.25)
    pytest.fail(f"no {what} within {WAIT_S:.0f} s")


@contextmanager
def _children(tmp: Path) -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=15)


def test_shipped_rules_pass_promtool_and_name_only_our_counters():
    done = subprocess.run([_tool("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "SUCCESS: 4 rules found" in done.stdout, done.stdout + done.stderr
    named = set(re.findall(r"\brkdet_audit_[a-z_]+", RULES.read_text()))
    assert named and named <= {name for name, _ in COUNTERS}, named - {name for name, _ in COUNTERS}


def test_python_textfile_passes_promtool_check_metrics():
    from rkdet.onboard.audit_prom import render

    text = render({name: 3 for name, _ in COUNTERS} | {"rkdet_audit_hash_seconds_total": 0.25}, BUILD)
    done = subprocess.run([_tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stdout + done.stderr


def _alerts(prom: str, name: str) -> list[dict]:
    return [a for a in _get(f"{prom}/api/v1/alerts")["data"]["alerts"] if a["labels"].get("alertname") == name]


def _rule(prom: str, name: str) -> dict | None:
    for group in _get(f"{prom}/api/v1/rules")["data"]["groups"]:
        for rule in group["rules"]:
            if rule["name"] == name:
                return rule
    return None


def test_planted_canary_failure_fires_the_shipped_alert_in_real_prometheus(tmp_path):
    import numpy as np

    exporter, prometheus = _tool("prometheus-node-exporter"), _tool("prometheus")
    textfiles, data = tmp_path / "textfile", tmp_path / "prometheus-data"
    rng = np.random.RandomState(1)
    golden = [[rng.standard_normal((1, 8)).astype(np.float32)] for _ in range(3)]
    runtime = APP_MODULE.EmulatedTinyRuntime()
    lite = RKNNLite(audit=AuditSettings(str(tmp_path / "log"), prom_dir=str(textfiles), prom_every=10,
                                        canary=Canary(golden, every_n=50), build=BUILD, background=False),
                    runtime=runtime)
    lite.load_rknn("unused.rknn")
    lite.init_runtime()  # the first canary run is the baseline; the textfile says 0 failures

    def serve(count: int) -> None:
        for _ in range(count):
            lite.inference(inputs=[rng.standard_normal((1, 8)).astype(np.float32)])

    serve(20)
    assert f'rkdet_audit_canary_failures_total{{build="{BUILD[:16]}"}} 0' in (textfiles / PROM_FILE).read_text()
    ne_port, prom_port = _free_port(), _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "board", "static_configs": [{"targets": [f"127.0.0.1:{ne_port}"]}]}]}))
    prom = f"http://127.0.0.1:{prom_port}"
    with _children(tmp_path) as procs, open(tmp_path / "servers.log", "wb") as log:
        procs.append(subprocess.Popen(
            [exporter, f"--web.listen-address=127.0.0.1:{ne_port}", "--collector.disable-defaults",
             "--collector.textfile", f"--collector.textfile.directory={textfiles}"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log))
        procs.append(subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--storage.tsdb.retention.time=1h"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=tmp_path))

        def sample(value: str):
            def probe():
                result = _get(f"{prom}/api/v1/query?query=rkdet_audit_canary_failures_total")["data"]["result"]
                return result if result and result[0]["value"][1] == value else None
            return probe

        seen = _until("scrape of 0 canary failures", sample("0"), procs)
        assert seen[0]["metric"]["build"] == BUILD[:16]
        def evaluated(after: str | None):
            def probe():
                rule = _rule(prom, "RkdetCanaryFailure") or {}
                ok = rule.get("health") == "ok" and rule.get("lastEvaluation") != after
                return rule["lastEvaluation"] if ok else None
            return probe

        first = _until("an evaluation of the rule", evaluated(None), procs)
        _until("an evaluation after the scrape", evaluated(first), procs)
        assert _rule(prom, "RkdetCanaryFailure")["state"] == "inactive"
        assert _alerts(prom, "RkdetCanaryFailure") == []  # nothing fires on a healthy board

        runtime.drift_after = runtime.calls  # planted: from now on the runtime's outputs differ
        serve(60)  # the next canary run (every 50) fails and rewrites the textfile at once
        assert lite.counters["rkdet_audit_canary_failures_total"] == 1
        _until("scrape of 1 canary failure", sample("1"), procs)
        firing = _until("RkdetCanaryFailure firing", lambda: [a for a in _alerts(prom, "RkdetCanaryFailure")
                                                              if a["state"] == "firing"] or None, procs)
        assert firing[0]["labels"]["build"] == BUILD[:16] and firing[0]["labels"]["severity"] == "critical"
        assert f"127.0.0.1:{ne_port}" in firing[0]["annotations"]["summary"]
    lite.release()
    assert all(p.poll() is not None for p in procs)
