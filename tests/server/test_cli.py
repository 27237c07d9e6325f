"""`piestream sql` (against a server and embedded), `piestream --help`, and psql-style tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from piestream.cli import build_parser, format_table, main
from piestream.server.pgwire import PgServer


def test_help_explains_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "serve" in out and "sql" in out and "psql -h 127.0.0.1 -p 4566" in out
    serve_help = build_parser().parse_args(["serve"])
    assert (
        serve_help.port == 4566
        and serve_help.host == "127.0.0.1"
        and serve_help.data_dir == "./piestream-data"
    )


def test_format_table_like_psql() -> None:
    text = format_table([("name", 1043), ("n", 23)], [("ann", "1"), ("bo", "100"), (None, None)])
    assert text.splitlines() == [
        " name |  n",
        "------+-----",
        " ann  |   1",
        " bo   | 100",
        "      |",
        "(3 rows)",
    ]


def test_sql_against_a_running_server(
    server: PgServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    port = str(server.port)
    assert (
        main(
            [
                "sql",
                "--port",
                port,
                "CREATE TABLE cli (k INT PRIMARY KEY, v VARCHAR); INSERT INTO cli VALUES (1, 'x')",
            ]
        )
        == 0
    )
    script = tmp_path / "q.sql"
    script.write_text("SELECT k, v FROM cli;\nSELECT count(*) AS n FROM cli;\n")
    assert main(["sql", "--port", port, "--server-only", "-f", str(script)]) == 0
    out = capsys.readouterr().out
    assert "CREATE TABLE" in out and "INSERT 0 1" in out
    assert " k | v\n---+---\n 1 | x\n(1 row)" in out and "(1 row)" in out
    assert main(["sql", "--port", port, "SELECT * FROM nope"]) == 1
    assert 'ERROR:  relation "nope" does not exist' in capsys.readouterr().err


def test_sql_embedded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "sql",
        "--embedded",
        "--runner",
        "local",
        "--barrier-interval",
        "0.05",
        "--data-dir",
        str(tmp_path),
    ]
    assert main([*args, "CREATE TABLE e (k INT PRIMARY KEY); INSERT INTO e VALUES (7)"]) == 0
    assert main([*args, "SELECT k FROM e; SELECT current_database()"]) == 0  # the data survived the restart
    out = capsys.readouterr().out
    assert " k\n---\n 7\n(1 row)" in out and " dev\n" in out
    assert main([*args, "SELEC"]) == 1
    assert "syntax error" in capsys.readouterr().err


def test_serve_refuses_bad_tls_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = ["--data-dir", str(tmp_path / "d"), "--runner", "local", "--port", "0"]
    assert main(["serve", *d, "--ssl-cert", str(tmp_path / "c.pem")]) == 2
    assert "--ssl-cert and --ssl-key go together" in capsys.readouterr().err
    assert main(["serve", *d, "--require-ssl-remote"]) == 2
    assert "--require-ssl-remote needs --ssl-cert" in capsys.readouterr().err
    (tmp_path / "c.pem").write_text("not a certificate")
    assert (
        main(["serve", *d, "--ssl-cert", str(tmp_path / "c.pem"), "--ssl-key", str(tmp_path / "c.pem")]) == 2
    )
    assert "cannot load the TLS certificate" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()  # refused before the data directory was opened


def test_dashboard_login_is_required_beyond_loopback() -> None:
    from piestream.cli import _loopback_host

    assert _loopback_host("127.0.0.1") and _loopback_host("localhost") and _loopback_host("::1")
    assert not _loopback_host("0.0.0.0") and not _loopback_host("192.0.2.7")
