"""docs/http-api.md against the server it describes: the OpenAPI page is served at /docs, the route table lists
exactly the app's routes, and every default in the limits table is ServeConfig's (a changed default or a new
route without a line on the page fails here)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from bertkit.serve.config import ServeConfig
from bertkit.serve.server import build_service
from bertkit.serve.app import create_app

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "http-api.md").read_text(encoding="utf-8")
UNITS = {"s": 1, "KiB": 1024, "MiB": 1024 * 1024}


@pytest.fixture(scope="module")
def app(tiny_model_dir):
    service = build_service(ServeConfig(model=str(tiny_model_dir)))
    yield create_app(service)
    service.close()


def table(title: str) -> list[list[str]]:
    section = PAGE.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    rows = [re.split(r"(?<!\\)\|", line.strip()[1:-1]) for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows[1:]]      # without the header row


def test_openapi_page_is_served_at_docs(app):
    with TestClient(app) as client:
        page = client.get("/docs")
        assert page.status_code == 200 and "swagger" in page.text.lower() and "/openapi.json" in page.text
        paths = set(client.get("/openapi.json").json()["paths"])
    assert {"/encode", "/v1/embeddings", "/predict", "/search", "/health", "/status"} <= paths


def test_route_table_lists_every_route(app):
    documented = set()
    for row in table("Routes"):
        documented |= {f"{method} {path}" for method, path in re.findall(r"(GET|POST) (/[\w/.]*)", row[0])}
        documented |= {f"GET {path}" for path in re.findall(r"`(/[\w/.]*)`", row[0]) if path != "/"} | (
            {"GET /"} if "`GET /`" in row[0] else set())
    served = {f"{method} {route.path}" for route in app.routes for method in getattr(route, "methods", ())
              if method != "HEAD" and route.path != "/docs/oauth2-redirect"}
    assert served == documented


def test_limit_defaults_are_serve_configs():
    defaults = ServeConfig()
    checked = 0
    for limit, default, setting, _ in table("Limits"):
        if not setting:
            continue
        name = setting.strip("`").removeprefix("--").replace("-", "_")
        if not hasattr(defaults, name):
            name += "_s"
        exact = re.search(r"\(([\d,]+) bytes\)", default)
        if exact:
            value = int(exact.group(1).replace(",", ""))
        else:
            number, unit = re.match(r"([\d,.]+)\s*(s|KiB|MiB)?", default).groups()
            value = float(number.replace(",", "")) * UNITS.get(unit or "", 1)
        assert getattr(defaults, name) == value, (limit, default, name)
        checked += 1
    assert checked >= 12
