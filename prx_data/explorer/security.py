"""Response headers, the Host check and the access token, applied to every request.

The pages carry no script, so the policy forbids all of it; images come only from this server.
A server bound to loopback answers only requests addressed to loopback names, so a web page
elsewhere cannot reach it through DNS rebinding. A server on any other address answers only
requests that carry the token generated at its start.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADERS = {
    "content-security-policy": (
        "default-src 'none'; img-src 'self'; style-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-resource-policy": "same-origin",
}
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


def allowed_hosts_for(bind_host: str) -> list[str] | None:
    """Host names a server bound to ``bind_host`` answers; None: any (bound to a network)."""
    try:
        loopback = ipaddress.ip_address(bind_host.strip("[]")).is_loopback
    except ValueError:
        loopback = bind_host == "localhost"
    return [*LOOPBACK_NAMES, bind_host] if loopback else None


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


# Access token ---------------------------------------------------------------------------------
TOKEN_COOKIE = "prx_token"
TOKEN_HEADER = "x-prx-token"


def is_loopback(host: str) -> bool:
    return allowed_hosts_for(host) is not None


def new_token() -> str:
    return secrets.token_urlsafe(32)


def check_bind(host: str, allow_remote: bool, show_opted_out: bool) -> str | None:
    """Why ``explore`` must not start with these arguments, or None."""
    if is_loopback(host):
        return None
    if not allow_remote:
        return (
            f"--host {host} is reachable from other machines: pass --allow-remote to serve the corpus "
            "there (a token is then required on every request)"
        )
    if show_opted_out:
        return "--show-opted-out is only allowed on a loopback address"
    return None


def _presented(scope: Scope) -> tuple[str | None, str | None]:
    """(token from a header or cookie, token from the ?token= query)."""
    headers = Headers(scope=scope)
    found = headers.get(TOKEN_HEADER)
    auth = headers.get("authorization", "")
    if not found and auth.lower().startswith("bearer "):
        found = auth[7:].strip()
    if not found:
        cookies = SimpleCookie()
        try:
            cookies.load(headers.get("cookie", ""))
        except CookieError:
            cookies = SimpleCookie()
        if TOKEN_COOKIE in cookies:
            found = cookies[TOKEN_COOKIE].value
    query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
    return found, query.get("token")


def _same(given: str | None, token: str) -> bool:
    # Constant time: the comparison does not reveal how much of a guess was right.
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


class TokenAuth:
    """Every request carries the server's token (header ``X-Prx-Token``, ``Authorization: Bearer``
    or the ``prx_token`` cookie). Opening the printed ``?token=`` link once sets the cookie and
    redirects to the same page without the token, so it does not stay in the address bar or in
    a Referer."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header, query = _presented(scope)
        if _same(header, self.token):
            await self.app(scope, receive, send)
            return
        if _same(query, self.token):
            rest = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True) if k != "token"]
            location = scope.get("path", "/") + (f"?{urlencode(rest)}" if rest else "")
            cookie = f"{TOKEN_COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
            response = Response(status_code=303, headers={"location": location, "set-cookie": cookie})
        else:
            response = PlainTextResponse("a token is required: open the link the explorer printed at start", status_code=401)
        await response(scope, receive, send)
