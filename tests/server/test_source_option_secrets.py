"""Connector options shown in pg_foreign_table.ftoptions (and so in pg_dump's script) leave out
secrets: librdkafka's SASL configs, keys, and the user:password of a URL."""

from __future__ import annotations

import pytest

from piestream.server.catalog.objects import _SECRET_OPTION, _shown


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "auth.password",
        "properties.sasl.password",
        "properties.sasl.jaas.config",
        "properties.sasl.oauthbearer.config",
        "properties.ssl.key.pem",
        "properties.ssl.keystore.password",
        "s3.access_key",
        "aws.credentials.secret_access_key",
        "api_key",
    ],
)
def test_secret_options_are_left_out(name: str) -> None:
    assert _SECRET_OPTION.search(name)


@pytest.mark.parametrize("name", ["connector", "topic", "properties.bootstrap.server", "schema.registry"])
def test_plain_options_are_shown(name: str) -> None:
    assert not _SECRET_OPTION.search(name)


def test_a_urls_user_and_password_are_left_out() -> None:
    assert _shown("http://user:hush@registry:8081/x") == "http://registry:8081/x"
    assert _shown("http://registry:8081") == "http://registry:8081"
    assert _shown("plain value") == "plain value"
