"""Who may call what: every route of every personality, against the table in docs/hostile-clients.md ("Who may call what"),
with no key, a wrong key and the right key, on a server with API keys and one without; stored Responses
belong to their key; a browser's form or `text/plain` POST from a foreign page changes nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import pytest
from ruamel.yaml import YAML

from aisim.api.server import make_app
from aisim.api.state import ServerState
from aisim.scenario import load_scenario
from aisim.testing import running_server

from .conftest import ROOT, TEST_SCENARIOS

ACCESS = TEST_SCENARIOS / "serve" / "access.yaml"
LISTENER = {"openai": 0, "vllm": 0, "vllm-metrics": 0, "admin": 0, "kserve": 1, "triton-metrics": 2, "dcgm-metrics": 3}
FILLED = {"{model}": "resnet50", "{version}": "1", "{id}": "resp_missing", "{region}": "missing"}
RIGHT, WRONG, ADMIN = "sk-right-key", "sk-wrong-key", "admin-token"


@dataclass(frozen=True)
class Route:
    personality: str
    method: str
    path: str
    who: str

    def url(self, listeners: list[str]) -> str:
        path = self.path
        for name, value in FILLED.items():
            path = path.replace(name, "quick" if name == "{model}" and self.personality == "openai" else value)
        if path == "/admin/events":
            path += "?count=1"
        return listeners[LISTENER[self.personality]] + path


def documented() -> list[Route]:
    text = (ROOT / "docs" / "hostile-clients.md").read_text(encoding="utf-8")
    table = text.split("<!-- routes -->", 1)[1].split("<!-- /routes -->", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.strip().splitlines()[2:]]
    return [Route(*row) for row in rows]


ROUTES = documented()


def _scenario(keys: bool, tmp_path_factory: pytest.TempPathFactory) -> str:
    yaml = YAML()
    document = yaml.load(ACCESS.read_text())
    if keys:
        document["server"]["apiKeys"] = [{"name": "team", "key": RIGHT}]
    path = tmp_path_factory.mktemp("access") / "access.yaml"
    with path.open("w") as out:
        yaml.dump(document, out)
    return str(path)


@pytest.fixture(scope="module", params=[(True, 0), (False, 0), (True, 2), (False, 2)],
                ids=["keys", "no-keys", "keys-split2", "no-keys-split2"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[bool, list[str]]]:
    """With and without API keys, in one process and split (`--api-server-count 2`): every route's answer must be
    the same whether an API server serves it or hands it on to the engine core."""
    keys, api_servers = request.param
    with running_server(_scenario(keys, tmp_path_factory), api_server_count=api_servers) as url:
        yield keys, url.listeners


def test_every_route_served_is_in_the_documented_table() -> None:
    state = ServerState.__new__(ServerState)  # the routes only: no simulation needed
    state.scenario = load_scenario(ACCESS)
    state.lora_updates = True
    documented_paths = {(r.personality, r.path) for r in ROUTES}
    for personality in LISTENER:
        app = make_app(state, (personality,))
        patterns = [rule.matcher.regex.pattern for rule in app.wildcard_router.rules
                    if rule.target.__name__ != "NotFoundHandler"]  # type: ignore[union-attr]
        for pattern in patterns:
            served = {personality, "openai"} if personality == "vllm" else {personality}  # vLLM is OpenAI plus
            examples = [Route(p, "", path, "").url([""] * 4).split("?")[0] for p, path in documented_paths if p in served]
            assert any(re.fullmatch(pattern.rstrip("$"), e) for e in examples), f"{personality} {pattern} not in docs/hostile-clients.md"


@pytest.mark.parametrize("route", ROUTES, ids=[f"{r.method} {r.personality} {r.path}" for r in ROUTES])
def test_each_route_asks_for_the_credentials_the_table_says(route: Route, server: tuple[bool, list[str]]) -> None:
    keys, listeners = server
    right = ADMIN if route.who == "admin" else RIGHT
    statuses = {}
    for name, token in (("none", None), ("wrong", WRONG), ("right", right)):
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        body = b"{}" if route.method in ("POST", "DELETE") else None
        response = httpx.request(route.method, route.url(listeners), headers=headers, content=body, timeout=10)
        statuses[name] = response.status_code
        assert response.headers.get("X-Content-Type-Options") == "nosniff"
    if route.who == "admin":
        assert statuses["none"] == 401 and statuses["wrong"] == 403 and statuses["right"] not in (401, 403)
    elif route.who == "key" and keys:
        assert statuses["none"] == 401 and statuses["wrong"] == 401 and statuses["right"] not in (401, 403)
    else:
        assert not {401, 403} & set(statuses.values()), statuses


def test_stored_responses_belong_to_the_key_that_created_them(tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("owners") / "owners.yaml"
    yaml = YAML()
    document = yaml.load(ACCESS.read_text())
    document["server"]["apiKeys"] = [{"name": "a", "key": "sk-team-a"}, {"name": "b", "key": "sk-team-b"}]
    with path.open("w") as out:
        yaml.dump(document, out)
    with running_server(path) as url:
        a = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-team-a", max_retries=0)
        b = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-team-b", max_retries=0)
        made = a.responses.create(model="quick", input="hello")
        assert a.responses.retrieve(made.id).id == made.id
        with pytest.raises(openai.NotFoundError):
            b.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError):
            b.responses.create(model="quick", input="more", previous_response_id=made.id)
        with pytest.raises(openai.NotFoundError):
            b.responses.delete(made.id)
        a.responses.delete(made.id)


def test_the_admin_personality_will_not_start_without_a_token(tmp_path_factory: pytest.TempPathFactory) -> None:
    yaml = YAML()
    folder = tmp_path_factory.mktemp("admin")
    document = yaml.load(ACCESS.read_text())
    del document["server"]["admin"]["token"]
    with (folder / "open.yaml").open("w") as out:
        yaml.dump(document, out)
    with pytest.raises(RuntimeError, match="needs server.admin.token"), running_server(folder / "open.yaml"):
        pass
    document["server"]["admin"]["insecure"] = True
    with (folder / "insecure.yaml").open("w") as out:
        yaml.dump(document, out)
    with pytest.raises(RuntimeError, match="only on a loopback address"), running_server(folder / "insecure.yaml",
                                                                                          host="0.0.0.0"):
        pass
    with running_server(folder / "insecure.yaml") as url:  # loopback and told it is insecure: served open
        assert httpx.get(f"{url}/admin/dcgm/inject").status_code == 200


BROWSER_POSTS = [
    ("/v1/load_lora_adapter", 0, "lora_name=evil&lora_path=/tmp/x", "application/x-www-form-urlencoded"),
    ("/v1/load_lora_adapter", 0, '{"lora_name": "evil", "lora_path": "/tmp/x"}', "text/plain"),
    ("/v2/repository/models/resnet50/unload", 1, "{}", "text/plain"),
    ("/v2/repository/models/resnet50/unload", 1, "", "application/x-www-form-urlencoded"),
    ("/v2/logging", 1, '{"log_verbose_level": 3}', "text/plain"),
    ("/admin/xid", 0, '{"gpu": "gpu0", "code": 79}', "text/plain"),
]


@pytest.mark.parametrize(("path", "listener", "body", "content_type"), BROWSER_POSTS)
def test_a_browser_post_from_a_foreign_page_changes_nothing(path: str, listener: int, body: str, content_type: str,
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    """What a web page can send without a CORS preflight: a form or `text/plain` POST. With a foreign `Host` (DNS
    rebinding) it is refused at the door; with the right `Host` and a foreign `Origin` too; with neither header
    (curl), its content type still is."""
    with running_server(_scenario(False, tmp_path_factory)) as url:
        target = url.listeners[listener] + path
        admin = {"Authorization": f"Bearer {ADMIN}"} if path.startswith("/admin") else {}
        rebinding = httpx.post(target, content=body, headers={"Content-Type": content_type, "Host": "evil.example:8080",
                                                              "Origin": "http://evil.example:8080", **admin})
        assert rebinding.status_code == 400 and "host" in rebinding.text.lower()
        foreign = httpx.post(target, content=body, headers={"Content-Type": content_type, "Origin": "https://evil.example",
                                                            **admin})
        assert foreign.status_code == 403
        no_origin = httpx.post(target, content=body, headers={"Content-Type": content_type, **admin})
        assert no_origin.status_code == 400
        for answer in (rebinding, foreign, no_origin):
            assert answer.headers["Content-Type"].startswith("application/json") and "Access-Control-Allow-Origin" not in answer.headers
            assert answer.headers["X-Content-Type-Options"] == "nosniff"
        state = url.state
        assert all("evil" not in adapters for adapters in state.lora_adapters.values())
        assert state.triton_logging["log_verbose_level"] == 0
        assert httpx.get(url.listeners[1] + "/v2/models/resnet50/ready").status_code == 200
        assert not any(served.crash for served in state.sim.served_models)


def test_cors_only_for_the_configured_origins(tmp_path_factory: pytest.TempPathFactory) -> None:
    yaml = YAML()
    document = yaml.load(ACCESS.read_text())
    document["server"]["corsOrigins"] = ["https://app.example"]
    path = tmp_path_factory.mktemp("cors") / "cors.yaml"
    with path.open("w") as out:
        yaml.dump(document, out)
    chat = {"model": "quick", "messages": [{"role": "user", "content": "hi"}]}
    with running_server(path) as url:
        preflight = httpx.options(f"{url}/v1/chat/completions", headers={
            "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type"})
        assert preflight.status_code == 204 and preflight.headers["Access-Control-Allow-Origin"] == "https://app.example"
        allowed = httpx.post(f"{url}/v1/chat/completions", json=chat, headers={"Origin": "https://app.example"})
        assert allowed.status_code == 200 and allowed.headers["Access-Control-Allow-Origin"] == "https://app.example"
        other = httpx.post(f"{url}/v1/chat/completions", json=chat, headers={"Origin": "https://other.example"})
        assert other.status_code == 403 and "Access-Control-Allow-Origin" not in other.headers
        unconfigured = httpx.options(f"{url}/v1/chat/completions", headers={"Origin": "https://other.example"})
        assert "Access-Control-Allow-Origin" not in unconfigured.headers


def test_the_server_options_are_validated_with_their_position(tmp_path_factory: pytest.TempPathFactory) -> None:
    from aisim.scenario.loader import check_file

    path = tmp_path_factory.mktemp("bad") / "bad.yaml"
    path.write_text(ACCESS.read_text().replace("  loraRuntimeUpdates: true\n",
                                               "  loraRuntimeUpdates: true\n  connections: {maxOpen: 0, headerTimeout: soon}\n"
                                               "  corsOrigins: [app.example]\n"))
    problems = {(p.path, p.line, p.column) for p in check_file(path).problems}
    line = ACCESS.read_text().splitlines().index("  loraRuntimeUpdates: true") + 2
    assert {("$.server.connections.maxOpen", line, 26), ("$.server.connections.headerTimeout", line, 44),
            ("$.server.corsOrigins[0]", line + 1, 17)} <= problems
