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
import shutil
import subprocess
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..errors import InvalidInput

if TYPE_CHECKING:  # pragma: no cover
    from ..store.git import GitStore

__all__ = ["redact", "check_name", "normalise_url", "http_credentials", "credential_helper",
           "ssh_command", "add_config_section", "remove_config_section"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]*@")


def redact(text: str) -> str:
    """``text`` with the user info (user, password, token) of every URL in it replaced by ``***``."""
    return _USERINFO.sub(r"\1***@", text)


def check_name(name: str) -> None:
    """Refuse a remote name git would not accept (letters, digits, ``.``, ``_``, ``-``)."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name or name.endswith((".lock", ".")):
        raise InvalidInput(f"invalid remote name {name!r}",
                           hint="Use letters, digits, '.', '_' or '-', e.g. origin.")


def normalise_url(url: str) -> str:
    """A remote URL as gitmem stores it: a path made absolute, a URL checked for its
    scheme and refused when it holds credentials (they never go into ``.git/config``)."""
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


def http_credentials(git: GitStore | None, url: str) -> tuple[str | None, str | None]:
    """(username, password) for an http(s) remote, looked up now and never stored."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return None, None
    if parsed.username:
        return None, None  # dulwich takes them from the URL (configured by hand)
    env_user, env_pass = os.environ.get("GITMEM_GIT_USERNAME"), os.environ.get("GITMEM_GIT_PASSWORD")
    if env_pass:
        return env_user or "git", env_pass
    # git's credential protocol: host with a port that is not the default, no path
    # (unless credential.useHttpPath), so entries stored by `git credential-store` match.
    port = _port(parsed)
    host = parsed.hostname if port is None else f"{parsed.hostname}:{port}"
    found = credential_helper(git, parsed.scheme, host, parsed.path.lstrip("/"))
    if found:
        return found
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    for fname in (os.path.join(home, ".git-credentials"), os.path.join(xdg, "git", "credentials")):
        try:
            with open(fname, encoding="utf-8") as handle:
                for line in handle:
                    entry = urlparse(line.strip())
                    if entry.scheme == parsed.scheme and entry.hostname == parsed.hostname \
                            and _port(entry) == port and entry.password:
                        from urllib.parse import unquote
                        return unquote(entry.username or ""), unquote(entry.password)
        except OSError:
            continue
    return None, None


def ssh_command() -> str | None:
    """The ssh program (with its options) the environment asks for, as git reads it:
    ``GIT_SSH_COMMAND``, else ``GIT_SSH``; None leaves the choice to the repository's
    ``core.sshCommand``, then plain ``ssh`` (keys and agent as for ``git``)."""
    return os.environ.get("GIT_SSH_COMMAND") or os.environ.get("GIT_SSH") or None


def _port(parsed: Any) -> int | None:
    try:
        return parsed.port
    except ValueError:
        return None


def credential_helper(git: GitStore | None, scheme: str, host: str, path: str) -> tuple[str, str] | None:
    """Ask the configured ``credential.helper`` programs (git's protocol: ``get`` on stdin).

    As git does: every ``credential.helper`` of the config stack (system, then
    ``~/.gitconfig``, then the repository; an empty value clears the list), in
    order, until one answers a password.  ``!cmd`` is a shell command, an
    absolute path is run as is, a name ``X`` is ``git-credential-X`` (on PATH,
    else ``git credential-X``, which finds git's own ``store`` and ``cache``).
    With no vault yet (``clone``) the user's git config is used, as by ``git clone``."""
    try:
        if git is not None:
            stack = git.repo.get_config_stack()
        else:
            from dulwich.config import StackedConfig
            stack = StackedConfig.default()
    except (OSError, ValueError):
        return None
    try:
        with_path = stack.get_boolean((b"credential",), b"useHttpPath", False)
    except (KeyError, ValueError):
        with_path = False
    request = f"protocol={scheme}\nhost={host}\n" + (f"path={path}\n" if with_path else "") + "\n"
    for helper in _helpers(stack):
        command = _helper_command(helper)
        if command is None:
            continue
        try:
            done = subprocess.run(["/bin/sh", "-c", command + ' "$@"', command, "get"], input=request,
                                  capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError, UnicodeError):
            continue
        answer = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
        if done.returncode == 0 and answer.get("password"):
            return answer.get("username", ""), answer["password"]
    return None


def _helpers(stack: Any) -> list[str]:
    found: list[str] = []
    for config in reversed(getattr(stack, "backends", None) or [stack]):  # lowest priority first
        try:
            values = list(config.get_multivar((b"credential",), b"helper"))
        except (KeyError, ValueError):
            continue
        for value in values:
            text = value.decode("utf-8", "replace").strip()
            found = found + [text] if text else []
    return found


def _helper_command(helper: str) -> str | None:
    if helper.startswith("!"):
        return helper[1:]
    first = helper.split()[0]
    if os.path.isabs(first):
        return helper
    if shutil.which(f"git-credential-{first}"):
        return f"git-credential-{helper}"
    if shutil.which("git"):
        return f"git credential-{helper}"
    return None


# ------------------------------------------------------------ .git/config edits
# gitmem edits ``.git/config`` line by line, the way ``git config`` does, and
# never re-serialises the whole file: dulwich's writer drops the quotes around a
# value holding ``;`` (``helper = "!f() { echo password=...; }; f"`` would come
# back as a comment after ``!f() { echo password=...``) and the user's comments.

def _quote(value: str) -> str:
    if any(c in value for c in "\n\r\x00"):
        raise InvalidInput("a git config value cannot hold a line break or NUL")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t") + '"'


def _header(section: str, subsection: str) -> str:
    return f'[{section} "' + subsection.replace("\\", "\\\\").replace('"', '\\"') + '"]'


def _is_header(line: str, section: str, subsection: str) -> bool:
    match = re.match(r'^\s*\[\s*([A-Za-z0-9.-]+)\s+"((?:[^"\\]|\\.)*)"\s*\]', line)
    return match is not None and match.group(1).lower() == section.lower() \
        and re.sub(r"\\(.)", r"\1", match.group(2)) == subsection


def _write_config(path: str, text: str) -> None:
    from dulwich.file import GitFile
    with GitFile(path, "wb") as handle:   # config.lock, then an atomic rename (as git does)
        handle.write(text.encode("utf-8", "surrogateescape"))


def add_config_section(config_path: str, section: str, subsection: str,
                       entries: list[tuple[str, str]]) -> None:
    """Append ``[section "subsection"]`` with ``entries`` to the git config file,
    leaving every other line as it is."""
    try:
        with open(config_path, encoding="utf-8", errors="surrogateescape", newline="") as handle:
            text = handle.read()
    except FileNotFoundError:
        text = ""
    if text and not text.endswith("\n"):
        text += "\n"
    text += _header(section, subsection) + "\n" + "".join(f"\t{k} = {_quote(v)}\n" for k, v in entries)
    _write_config(config_path, text)


def remove_config_section(config_path: str, section: str, subsection: str) -> None:
    """Remove every ``[section "subsection"]`` block from the git config file (the
    lines up to the next section header), leaving every other line as it is."""
    with open(config_path, encoding="utf-8", errors="surrogateescape", newline="") as handle:
        lines = handle.read().splitlines(keepends=True)
    out, skipping = [], False
    for line in lines:
        if line.lstrip().startswith("["):
            skipping = _is_header(line, section, subsection)
        if not skipping:
            out.append(line)
    _write_config(config_path, "".join(out))
