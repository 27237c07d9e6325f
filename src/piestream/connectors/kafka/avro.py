"""Writer schemas of ENCODE AVRO: ``schema.location = 'file://...'`` (one bare schema) or
``schema.registry = 'http://...'`` (Confluent's wire format: each message names its schema id,
fetched once per id from the registry's ``GET /schemas/ids/{id}``)."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from typing import Any

from piestream.connectors.options import InvalidOption
from piestream.plan.source import SourceSpec

_CACHE: dict[tuple[str, int], Any] = {}
_LOCK = threading.Lock()


def _parse(schema: Any) -> Any:
    import fastavro

    return fastavro.parse_schema(schema)


def registry_schema(url: str, schema_id: int) -> Any:
    """The parsed writer schema `schema_id` of the registry at `url` (cached per process)."""
    key = (url, schema_id)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/schemas/ids/{schema_id}", timeout=10) as r:
            body = json.loads(r.read())
    except Exception as e:
        raise InvalidOption(f"schema id {schema_id} not found in the registry {url}: {e}") from None
    parsed = _parse(json.loads(body["schema"]))
    with _LOCK:
        _CACHE[key] = parsed
    return parsed


def avro_schema_source(spec: SourceSpec) -> dict[str, Any]:
    """`make_decoder` arguments for the spec's ENCODE AVRO options."""
    eo = {k.lower(): v for k, v in spec.encode_options.items()}
    location = eo.get("schema.location")
    registry = eo.get("schema.registry")
    if (location is None) == (registry is None):
        raise InvalidOption(
            "ENCODE AVRO needs one of schema.location = 'file://...' or schema.registry = 'http://...'"
        )
    if location is not None:
        path = location.removeprefix("file://")
        try:
            with open(path) as f:
                schema = _parse(json.load(f))
        except (OSError, ValueError) as e:
            raise InvalidOption(f"cannot read the Avro schema at {location}: {e}") from None
        fn: Callable[[int | None], Any] = lambda _sid: schema  # noqa: E731
        return {"avro_schema": fn, "confluent": False}
    assert registry is not None
    url = registry.split(",")[0].strip()
    return {"avro_schema": lambda sid: registry_schema(url, int(sid or 0)), "confluent": True}
