"""Remote URLs and credentials: validating a remote's name and URL, finding
credentials at sync time (never stored), and keeping them out of messages.

Credentials are never stored by gitmem: ssh uses the ssh agent and keys; for
https, a URL with a user or password is refused and credentials come, at sync
time only, from ``GITMEM_GIT_USERNAME`` / ``GITMEM_GIT_PASSWORD``, the
configured git ``credential.helper``, or ``~/.git-credentials``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from .errors import InvalidInput

if TYPE_CHECKING:  # pragma: no cover
    from .vault import Vault

__all__ = ["redact", "check_name", "normalise_url", "http_credentials", "credential_helper"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]*@")


def redact(text: str) -> str:
    """``text`` with the user info (user, password, token) of every URL in it replaced by ``***``."""
    return _USERINFO.sub(r"\1***@", text)


def check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name or name.endswith((".lock", ".")):
        raise InvalidInput(f"invalid remote name {name!r}",
                           hint="Use letters, digits, '.', '_' or '-', e.g. origin.")


def normalise_url(url: str) -> str:
    if not isinstance(url, str) or not url.strip() or any(c in url for c in "\n\r\x00"):
        raise InvalidInput("remote URL is empty or has control characters")
    url = url.strip()
    parsed = urlparse(url)
    if "://" in url:
        if parsed.scheme not in ("file", "ssh", "git", "http", "https", "git+ssh", "ssh+git"):
            raise InvalidInput(f"unsupported remote URL scheme {parsed.scheme!r}",
                               hint="Use a path, ssh://, user@host:path or https://.")
        if parsed.password or (parsed.scheme in ("http", "https") and parsed.username):
            raise InvalidInput(
                f"the remote URL {redact(url)} contains credentials; gitmem does not store them",
                code="credentials_in_url",
                hint="Give the URL without user:password@ and provide credentials through a git "
                     "credential helper, ~/.git-credentials, or GITMEM_GIT_USERNAME/GITMEM_GIT_PASSWORD.")
        return url
    if re.match(r"^[^/\\]+@[^/\\:]+:", url) or (re.match(r"^[A-Za-z0-9.-]+:", url) and not os.path.exists(url)):
        return url  # scp-like ssh: user@host:path
    return os.path.abspath(os.path.expanduser(url))


def http_credentials(vault: "Vault | None", url: str) -> tuple[str | None, str | None]:
    """(username, password) for an http(s) remote, looked up now and never stored."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return None, None
    if parsed.username:
        return None, None  # dulwich takes them from the URL (configured by hand)
    env_user, env_pass = os.environ.get("GITMEM_GIT_USERNAME"), os.environ.get("GITMEM_GIT_PASSWORD")
    if env_pass:
        return env_user or "git", env_pass
    found = credential_helper(vault, parsed.scheme, parsed.hostname, parsed.path.lstrip("/"))
    if found:
        return found
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    for fname in (os.path.join(home, ".git-credentials"), os.path.join(xdg, "git", "credentials")):
        try:
            with open(fname, encoding="utf-8") as handle:
                for line in handle:
                    entry = urlparse(line.strip())
                    if entry.scheme == parsed.scheme and entry.hostname == parsed.hostname and entry.password:
                        from urllib.parse import unquote
                        return unquote(entry.username or ""), unquote(entry.password)
        except OSError:
            continue
    return None, None


def credential_helper(vault: "Vault | None", scheme: str, host: str, path: str) -> tuple[str, str] | None:
    """Ask the configured ``credential.helper`` (git's protocol: ``get`` on stdin).

    The vault's git config stack (repository, then ``~/.gitconfig``...); with no
    vault yet (``clone``), the user's git config, as ``git clone`` does."""
    try:
        if vault is not None:
            stack = vault.git.repo.get_config_stack()
        else:
            from dulwich.config import StackedConfig
            stack = StackedConfig.default()
        helper = stack.get((b"credential",), b"helper").decode()
    except (KeyError, OSError, ValueError):
        return None
    helper = helper.strip()
    if not helper:
        return None
    if helper.startswith("!"):
        argv = ["/bin/sh", "-c", helper[1:] + " get"]
    else:
        parts = shlex.split(helper)
        program = parts[0] if os.path.isabs(parts[0]) else shutil.which(f"git-credential-{parts[0]}")
        if program is None:
            return None
        argv = [program, *parts[1:], "get"]
    request = f"protocol={scheme}\nhost={host}\npath={path}\n\n"
    try:
        done = subprocess.run(argv, input=request, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    answer = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    if done.returncode == 0 and answer.get("password"):
        return answer.get("username", ""), answer["password"]
    return None
