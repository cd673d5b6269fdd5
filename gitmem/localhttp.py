"""Serving HTTP on this machine: the rules gitmem's two servers share.

``gitmem mcp --http`` and ``gitmem view --serve`` both answer on a loopback
address and must not answer a web page that reaches them through a name it
controls (DNS rebinding: ``http://evil.example:PORT/`` resolving to 127.0.0.1),
nor anyone who merely knows the port.  This module holds what both need:

* how a bind host is named (:func:`normalize_host`, :func:`authority`) and which
  hosts count as "this machine only" (:func:`is_loopback_host`);
* the ``Host`` and ``Origin`` header values a server bound to ``host:port``
  accepts (:func:`allowed_hosts_and_origins`) and the checks of a request's
  headers against them (:func:`foreign_host`, :func:`foreign_origin`);
* tokens: an empty one counts as none (:func:`clean_token`), a new random one
  (:func:`new_token`), and the comparison, in constant time (:func:`token_matches`).

It imports nothing of gitmem but its errors, so the exchange and agent layers
can both use it.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets
from collections.abc import Collection

from .errors import InvalidInput

__all__ = ["LOOPBACK_NAMES", "normalize_host", "is_loopback_host", "authority", "allowed_hosts_and_origins",
           "foreign_host", "foreign_origin", "clean_token", "new_token", "token_matches"]

#: The three spellings everyone reads as "this machine only".  Other 127.x addresses are
#: loopback on Linux too, but they are routinely handed to containers, VPN agents and port
#: forwards, so like any address they need a token.
LOOPBACK_NAMES = ("127.0.0.1", "::1", "localhost")
_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")


def normalize_host(host: str) -> str:
    """``host`` as gitmem binds and names it: IP literals in canonical form
    (``[::1]`` and ``0:0::1`` become ``::1``), ``localhost`` in lower case."""
    bare = host.strip()
    if bare.startswith("[") and bare.endswith("]"):
        bare = bare[1:-1]
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        return "localhost" if bare.lower() == "localhost" else bare


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def is_loopback_host(host: str) -> bool:
    """True only for 127.0.0.1, ::1 and ``localhost``."""
    return normalize_host(host) in LOOPBACK_NAMES


def authority(host: str, port: int | None = None) -> str:
    """``host[:port]`` as it appears in a Host header or URL (IPv6 in brackets)."""
    name = f"[{host}]" if ":" in host else host
    return name if port is None else f"{name}:{port}"


def allowed_hosts_and_origins(host: str, port: int,
                              extra_hosts: tuple[str, ...] | list[str] = ()) -> tuple[list[str], list[str]]:
    """The Host and Origin header values a server bound to ``host``:``port`` accepts.

    The bind host (with and without the port), the loopback spellings only
    when binding a loopback name, and ``extra_hosts`` (names clients reach a
    wildcard or LAN bind by).  Anything else is what a DNS-rebinding page
    would send (``Host: evil.example``).
    """
    names = [normalize_host(host)]
    if names[0] in LOOPBACK_NAMES:
        names += [n for n in LOOPBACK_NAMES if n not in names]
    for extra in extra_hosts:
        name = normalize_host(extra)
        # A bare name or address only: "box.lan:8765", "http://box.lan" or the SDK's "box.lan:*"
        # wildcard would silently allow nothing, or too much.
        if not (_is_ip(name) or _HOST_NAME.fullmatch(name)):
            raise InvalidInput(f"not a host name: {extra!r}",
                               hint="Give --allow-host a bare name or address such as box.lan or 192.168.1.5.")
        if name not in names:
            names.append(name)
    hosts: list[str] = []
    origins: list[str] = []
    for name in names:
        hosts += [authority(name, port), authority(name)]
        origins.append(f"http://{authority(name, port)}")
        if port == 80:  # browsers leave the default port out of an Origin
            origins.append(f"http://{authority(name)}")
    return hosts, origins


def foreign_host(header: str | None, hosts: Collection[str]) -> bool:
    """True when a request's ``Host`` header is missing or names none of ``hosts``
    (host names compare in any letter case)."""
    return header is None or header.strip().lower() not in {h.lower() for h in hosts}


def foreign_origin(header: str | None, origins: Collection[str]) -> bool:
    """True when a request carries an ``Origin`` that is none of ``origins``
    (``null``, sent by sandboxed frames and some redirects, included).  A request
    without one (a typed address, a non-browser client) is not foreign."""
    return header is not None and header.strip().lower() not in {o.lower() for o in origins}


def clean_token(token: str | None) -> str | None:
    """``token`` without surrounding blanks; None for no token.  An empty value (an
    environment variable set to "") must count as no token, never as a token an
    empty header would match."""
    return (token or "").strip() or None


def new_token() -> str:
    """A fresh random token: 32 random bytes, URL-safe (43 characters)."""
    return secrets.token_urlsafe(32)


def token_matches(given: str | bytes | None, token: str | bytes) -> bool:
    """Whether ``given`` is ``token``, compared in constant time (no timing tells
    how much of a guess was right)."""
    if given is None:
        return False
    as_bytes = given.encode("utf-8", "surrogateescape") if isinstance(given, str) else given
    want = token.encode("utf-8") if isinstance(token, str) else token
    return hmac.compare_digest(as_bytes, want)
