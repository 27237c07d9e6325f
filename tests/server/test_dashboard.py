"""The web dashboard in a real headless Chromium (Debian's chromium + chromium-driver, installed
by scripts/setup.sh): the overview lists a created MV, its job page draws the fragment graph
with the MV's operators and state tables, and a screenshot is saved in the test's temp dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from piestream.server.dashboard import Dashboard
from piestream.server.database import Database, DatabaseConfig


def test_dashboard_shows_relations_fragments_and_epochs(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    cfg = DatabaseConfig(runner="local", barrier_interval=0.05)
    with Database(tmp_path / "d", config=cfg) as db:
        s = db.session()
        s.execute("CREATE TABLE bids (auction int, price int)")
        s.execute("INSERT INTO bids VALUES (1, 10), (1, 30), (2, 5)")
        s.execute(
            "CREATE MATERIALIZED VIEW top_price AS SELECT auction, max(price) AS hi, count(*) AS n "
            "FROM bids GROUP BY auction"
        )
        s.execute("INSERT INTO bids VALUES (3, 7)")
        s.execute("CREATE FUNCTION twice(x int) RETURNS int LANGUAGE sql AS $$ SELECT x * 2 $$")
        s.execute("CREATE SUBSCRIPTION price_changes FROM top_price WITH (retention = '2h')")
        s.execute("CREATE MATERIALIZED VIEW ratio AS SELECT auction, 100 / (price - 10) AS r FROM bids")
        dash = Dashboard(db, port=0).start()
        try:
            browser.get(dash.url)
            relations = browser.find_element(By.ID, "relations").text
            assert "top_price" in relations and "bids" in relations
            assert "materialized view" in relations
            assert "twice(integer)" in browser.find_element(By.ID, "functions").text
            assert browser.find_elements(By.CSS_SELECTOR, "svg.epoch-timeline rect.latency")  # epochs ran
            assert "top_price" in browser.find_element(By.ID, "backfills").text
            backfills = browser.find_element(By.ID, "backfills").text
            assert "256/256" in backfills and "100.0%" in backfills  # backfill finished
            assert "3 / 3" in backfills  # rows done / total: the 3 rows of bids at CREATE
            browser.save_screenshot(str(tmp_path / "dashboard.png"))
            subs = browser.find_element(By.ID, "subscriptions").text
            assert "price_changes" in subs and "top_price" in subs and "2 hours" in subs
            records = browser.find_element(By.ID, "error-records").text
            assert "ratio" in records and "22012" in records and "division by zero" in records

            browser.find_element(By.LINK_TEXT, "top_price").click()
            graph = browser.find_element(By.CSS_SELECTOR, "svg.fragment-graph")
            fragments = graph.find_elements(By.CSS_SELECTOR, "g.fragment")
            assert len(fragments) >= 2  # the MV's fragments and the table's it reads
            text = graph.text
            assert "HashAgg" in text and "Materialize" in text and "parallelism" in text
            assert "upstream job" in text  # the table's fragment, drawn above the MV's
            assert graph.find_elements(By.CSS_SELECTOR, "line.edge")
            assert graph.size["width"] > 300 and graph.size["height"] > 100  # really drawn
            browser.save_screenshot(str(tmp_path / "fragments.png"))
        finally:
            dash.stop()
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    assert (tmp_path / "fragments.png").stat().st_size > 10_000


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("dashboard", [True, False])
def test_serve_starts_the_dashboard_unless_told_not_to(tmp_path: Path, dashboard: bool) -> None:
    import signal
    import subprocess
    import sys
    import urllib.request

    port, dash_port = _free_port(), _free_port()
    cmd = [
        sys.executable,
        "-m",
        "piestream.cli",
        "serve",
        "--runner",
        "local",
        "--data-dir",
        str(tmp_path / "d"),
    ]
    cmd += ["--port", str(port), "--dashboard-port", str(dash_port)] + (
        [] if dashboard else ["--no-dashboard"]
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        ready = next(line for line in proc.stdout if "ready on" in line)
        url = f"http://127.0.0.1:{dash_port}/"
        assert (url in ready) == dashboard, ready
        if dashboard:
            page = urllib.request.urlopen(url, timeout=10).read().decode()
            assert "piestream dashboard" in page
        else:
            with pytest.raises(OSError):
                urllib.request.urlopen(url, timeout=2)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def test_dashboard_shows_a_running_backfill(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import threading
    import time

    from selenium.webdriver.common.by import By

    from piestream.stream.executor import StreamingConfig

    cfg = DatabaseConfig(
        runner="local", barrier_interval=0.05, streaming=StreamingConfig(backfill_rows_per_epoch=100)
    )
    with Database(tmp_path / "d", config=cfg) as db:
        db.execute("CREATE TABLE big (k int PRIMARY KEY, g int)")
        db.execute("INSERT INTO big SELECT x, x % 10 FROM generate_series(1, 20000) AS s(x)")
        create = threading.Thread(
            target=db.execute,
            args=("CREATE MATERIALIZED VIEW slow AS SELECT g, count(*) AS n FROM big GROUP BY g",),
        )
        dash = Dashboard(db, port=0).start()
        create.start()
        try:
            seen: list[tuple[int, int]] = []
            deadline = time.monotonic() + 120
            while create.is_alive() and len(seen) < 2 and time.monotonic() < deadline:
                browser.get(dash.url)
                for row in browser.find_elements(By.CSS_SELECTOR, "#backfills tr"):
                    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
                    if cells and cells[0] == "slow" and cells[1] == "big":
                        done, total = (int(x.replace(",", "")) for x in cells[3].split(" / "))
                        if 0 < done < total:
                            seen.append((done, total))
                            if len(seen) == 1:
                                browser.save_screenshot(str(tmp_path / "backfill.png"))
            assert len(seen) >= 2, "the page never showed the backfill in progress"
            assert seen[-1][0] >= seen[0][0]  # it moves forward
        finally:
            create.join()
            dash.stop()
        assert db.execute("SELECT sum(n) FROM slow")[0].rows == [(20000,)]
