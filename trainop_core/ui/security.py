"""Who may use the page: the token `trainop ui` printed, from this machine's own pages only.

One ASGI middleware in front of every route, static files included:
- Host: with a loopback address only the loopback names of this port are answered, so a web
  page elsewhere cannot reach the server through a DNS name rebound to 127.0.0.1.
- Token: every request carries the token (`?token=` in the URL `trainop ui` printed, then the
  cookie that first visit sets: HttpOnly, SameSite=Strict, named after the port) or gets 401;
  compared in constant time. A URL with the token is redirected to itself without it, so it
  does not stay in the address bar or the history.
- Changes (any method but GET and HEAD): an Origin header naming this server and the CSRF
  header (a value derived from the token, given to the page in a meta tag) or 403.
- Only plain HTTP requests are served: a WebSocket (or any other protocol's) connection is
  closed, and an HTTP request asking for an Upgrade gets 400.
- The token's redirect goes to a path of this server only: the request's path, percent-encoded,
  or `/` when it would not read as one (`//host`, a backslash: an open redirect otherwise).
- Every answer: a Content-Security-Policy that allows only this server's own scripts, styles
  and connections (no inline script, no eval), and no framing, sniffing or referrer.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

CSRF_HEADER = "x-trainop-csrf"
SAFE_METHODS = ("GET", "HEAD")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def new_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Access:
    """The server's token, its port, and the Host names it answers (empty: any host)."""

    token: str
    port: int
    hosts: frozenset[str]

    @property
    def cookie(self) -> str:
        return f"trainop-ui-{self.port}"

    @property
    def csrf(self) -> str:
        """What the page sends in CSRF_HEADER: derived from the token, never the token."""
        return hmac.new(self.token.encode(), b"csrf", hashlib.sha256).hexdigest()

    def valid(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(
            presented.encode(), self.token.encode()
        )


def loopback_hosts(host: str, port: int) -> frozenset[str]:
    names = {"127.0.0.1", "localhost", "[::1]", host if ":" not in host else f"[{host}]"}
    return frozenset(f"{name}:{port}" for name in names)


class Guard:
    """The middleware: see the module's docstring."""

    def __init__(self, app: App, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await _refuse_protocol(scope, receive, send)
            return
        headers = _headers(scope)
        refusal = self._refusal(scope, headers) or _upgrade_refusal(headers)
        if refusal is not None:
            await _plain(send, *refusal)
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query and scope["method"] in SAFE_METHODS:
            await self._redirect_without_token(scope, query, send)
            return
        await self.app(scope, receive, _with_headers(send))

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str] | None:
        host = headers.get("host", "")
        if self.access.hosts and host not in self.access.hosts:
            return 403, "403: this server answers only for its own loopback address\n"
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        cookie = _cookie(headers.get("cookie", ""), self.access.cookie)
        if not (self.access.valid(query.get("token")) or self.access.valid(cookie)):
            return 401, "401: open the URL `trainop ui` printed (it carries the token)\n"
        if scope["method"] not in SAFE_METHODS:
            if headers.get("origin") != f"http://{host}":
                return 403, "403: a change must come from this server's own page (Origin)\n"
            if not hmac.compare_digest(
                headers.get(CSRF_HEADER, "").encode(), self.access.csrf.encode()
            ):
                return 403, f"403: a change needs the {CSRF_HEADER} header of the page\n"
        return None

    async def _redirect_without_token(
        self, scope: Scope, query: dict[str, str], send: Send
    ) -> None:
        rest = urlencode({k: v for k, v in query.items() if k != "token"})
        location = same_server_path(scope.get("path", "/")) + (f"?{rest}" if rest else "")
        cookie = f"{self.access.cookie}={self.access.token}; Path=/; HttpOnly; SameSite=Strict"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", location.encode("latin-1", errors="replace")),
                    (b"set-cookie", cookie.encode()),
                    (b"content-length", b"0"),
                    *HEADERS,
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def same_server_path(path: str) -> str:
    """`path` as a redirect's Location that can only name a path of this server: "/" when it
    does not start with one "/" (a "//host" or "/\\host" is another server to a browser)."""
    encoded = quote(path, safe="/:@!$&'()*+,;=-._~")
    if not encoded.startswith("/") or encoded.startswith("//"):
        return "/"
    return encoded


def _upgrade_refusal(headers: dict[str, str]) -> tuple[int, str] | None:
    if "upgrade" in headers or "upgrade" in headers.get("connection", "").lower():
        return 400, "400: this server speaks plain HTTP only (no WebSocket, no Upgrade)\n"
    return None


async def _refuse_protocol(scope: Scope, receive: Receive, send: Send) -> None:
    """A WebSocket is closed at its handshake (the server answers 403); any other kind of
    connection is left unanswered."""
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1008})


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _cookie(header: str, name: str) -> str | None:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:  # a garbled Cookie header is no cookie, not an error page
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


def _with_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            names = {name.lower() for name, _ in message.get("headers", [])}
            extra = [(name, value) for name, value in HEADERS if name not in names]
            message["headers"] = [*message.get("headers", []), *extra]
        await send(message)

    return sending


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
