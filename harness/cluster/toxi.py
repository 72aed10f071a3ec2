"""A strict client for the toxiproxy server, on top of toxiproxy-python.

toxiproxy-python falls short in ways that matter to a fault injector: it sends requests with
no timeout (a hung server hangs the harness), lets every 5xx through as success (so a
proxy that failed to disable looks disabled), and maps any 400 to InvalidToxic. We keep its
Proxy and Toxiproxy classes and route their requests through ``StrictAPI`` instead, which
times out and raises ``ToxiproxyError`` on every non-2xx answer.
"""
from __future__ import annotations

import requests
import toxiproxy.proxy
import toxiproxy.server
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer

from onceproof.errors import SetupError


class ToxiproxyError(SetupError):
    """The toxiproxy server refused a request or did not answer in time."""


class ToxiproxySilent(ToxiproxyError):
    """The toxiproxy server did not answer: it is gone, or hung."""


class StrictAPI(APIConsumer):
    timeout = 10.0

    @classmethod
    def _request(cls, method: str, url: str, **kwargs) -> requests.Response:
        endpoint = f"http://{cls.host}:{cls.port}{url}"
        try:
            response = requests.request(method, endpoint, timeout=cls.timeout, **kwargs)
        except requests.RequestException as exc:
            raise ToxiproxySilent(f"toxiproxy at {cls.host}:{cls.port} did not answer "
                                 f"{method} {url}: {exc}") from None
        if not response.ok:
            raise ToxiproxyError(f"toxiproxy refused {method} {url}: HTTP "
                                 f"{response.status_code} {response.text.strip()[:200]}")
        return response

    @classmethod
    def get(cls, url, params=None, **kwargs):
        return cls._request("GET", url, params=params, **kwargs)

    @classmethod
    def post(cls, url, data=None, json=None, **kwargs):
        return cls._request("POST", url, data=data, json=json, **kwargs)

    @classmethod
    def patch(cls, url, json=None, **kwargs):
        return cls._request("PATCH", url, json=json, **kwargs)

    @classmethod
    def delete(cls, url, **kwargs):
        return cls._request("DELETE", url, **kwargs)


# The library's classes look APIConsumer up as a module global at call time.
toxiproxy.proxy.APIConsumer = StrictAPI
toxiproxy.server.APIConsumer = StrictAPI


class Toxi:
    """The operations the harness needs, each one request, each one checked."""

    def __init__(self, host: str, port: int):
        StrictAPI.host, StrictAPI.port = host, port
        self.server = Toxiproxy()

    def version(self) -> str:
        return StrictAPI.get("/version").text.strip()

    def create(self, name: str, listen: str, upstream: str) -> None:
        self.server.create(upstream=upstream, name=name, listen=listen, enabled=True)

    def proxies(self) -> dict[str, dict]:
        """Every proxy with its enabled flag and toxics, as the server reports them."""
        return StrictAPI.get("/proxies").json()

    def set_enabled(self, name: str, enabled: bool) -> None:
        # PATCH since 2.6.0, which logs POST here as deprecated.
        StrictAPI.patch(f"/proxies/{name}", json={"enabled": enabled})

    def add_toxic(self, proxy: str, type: str, stream: str = "downstream",
                  attributes: dict | None = None, toxicity: float = 1.0,
                  name: str | None = None) -> str:
        name = name or f"{type}_{stream}"
        StrictAPI.post(f"/proxies/{proxy}/toxics", json={
            "name": name, "type": type, "stream": stream, "toxicity": toxicity,
            "attributes": attributes or {}})
        return name

    def update_toxic(self, proxy: str, name: str, attributes: dict) -> None:
        StrictAPI.post(f"/proxies/{proxy}/toxics/{name}", json={"attributes": attributes})

    def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        StrictAPI.post("/reset")
