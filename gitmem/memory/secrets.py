"""Spotting secrets in memory content before git makes them permanent.

Agents write memories from untrusted text (tool output, web pages, chat
logs), and git never forgets: a key committed once stays in every clone until
history is rewritten (``gitmem purge``).  So every memory gitmem renders passes
through :func:`screen` (called from ``Vault._render``), and every commit through
the write checks, which apply the vault's policy, ``secrets:`` in ``.gitmem.yaml``:

* ``refuse`` (default): the write fails with :class:`SecretDetected`
  (code ``secret_detected``), naming each kind and where it is, never the value;
* ``redact``: each secret is replaced by ``[REDACTED:<kind>]`` and the write
  goes ahead;
* ``allow``: no check.

What counts as a secret: provider formats that are unambiguous by shape (AWS
access key ids, GitHub / GitLab / Slack / OpenAI / Anthropic / Google / Stripe
keys and tokens, Slack webhooks, PEM private key blocks, JWTs), passwords in
URLs (``postgres://user:password@host``, ``https://user:token@git.example``) and generic
assignments (``password=...``, ``api_key: ...``, ``client_secret=...``) whose
value looks random (long, high entropy, mixed character classes, not a
placeholder such as ``<your-key>`` or ``os.environ[...]``).  Ordinary prose
that merely talks about passwords or tokens is not flagged.

The commit author (name and email) is screened too (:func:`screen_identity`), wherever
it comes from: an ``author`` argument, ``--author``, ``GITMEM_AUTHOR``, an agent's
name, ``author:`` / ``user:`` in ``.gitmem.yaml``, a person's git identity.  An
author cannot be redacted (``[REDACTED]`` as a commit author would hide who wrote),
so under ``refuse`` and ``redact`` alike a secret there refuses the write; ``allow``
lets it through, as it does content.

Every commit also passes the vault's write checks (:mod:`gitmem.write.checks`), which
scan the whole file text and the path with :func:`scan_text`, whichever front
door made it.  A file a person saves outside gitmem (Obsidian, vim) with a
secret is left uncommitted (never rewritten) and reported by the watcher and
``gitmem doctor``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidMetadata, SecretDetected

__all__ = ["Finding", "POLICIES", "policy_of", "scan_text", "redact_text", "screen", "screen_identity"]

POLICIES = ("refuse", "redact", "allow")

# (kind, pattern): the whole match is the secret.  Order matters where shapes
# overlap (Anthropic's sk-ant- before OpenAI's sk-).
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("private_key", re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|.*\Z)", re.DOTALL)),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{50,255})\b")),
    ("gitlab_token", re.compile(r"\bgl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_\-]{20,}")),
    ("slack_token", re.compile(r"\bxox(?:[abposr]|e\.xox[bp])-[A-Za-z0-9-]{10,}")),
    ("slack_webhook", re.compile(
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_\-]{20,}")),
    ("anthropic_key", re.compile(r"\bsk-ant-(?:api|admin|sid)[0-9]{2}-[A-Za-z0-9_\-]{20,}")),
    ("openai_key", re.compile(
        r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-|None-)?(?=[A-Za-z0-9_\-]*[0-9])"
        r"(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{20,}")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])")),
    ("stripe_key", re.compile(r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}\b")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{10,}")),
]

# A password in a URL's userinfo: ``scheme://user:password@host`` (database URLs,
# git remotes with a token).  The password is the secret; the user name is kept.
_URL_CREDENTIAL = re.compile(
    r"(?i)\b[a-z][a-z0-9+.\-]{1,20}://[^\s:/@\[\]]{1,256}:(?P<value>[^\s@/]{1,256})@[A-Za-z0-9\[]")
_WEAK_PLACEHOLDER = re.compile(r"(?i)^(?:pass(?:word|wd)?|passw0rd|secret|pwd|token|x-oauth-basic|x+|\*+)$")

# ``name = value`` / ``name: value`` / ``"name": "value"`` where the name says secret.
_ASSIGNMENT = re.compile(
    r"""(?ix)
    \b(?P<name>[a-z0-9_.\-]*?(?:password|passwd|passphrase|pwd|secret|api[_\-]?key|apikey|
        access[_\-]?key|access[_\-]?token|auth[_\-]?token|bearer|client[_\-]?secret|
        private[_\-]?key|refresh[_\-]?token|session[_\-]?token|token)[a-z0-9_\-]*)
    ["']?\s*(?:=|:(?!//)|=>)\s*
    (?P<quote>["']?)(?P<value>[^\s"'`,;<>()\[\]{}]{8,})(?P=quote)
    """)
# Values that are references or placeholders, not secrets.
_PLACEHOLDER = re.compile(
    r"""(?ix)^(?:
        .*(?:environ|getenv|process\.env|secrets?\.|vault:|\$\{|\$\(|\{\{|%\().*|
        \$[A-Z_][A-Z0-9_]*|
        .*(?:redacted|example|placeholder|changeme|your[_\-]|xxxx|\*\*\*\*|\.\.\.).*|
        (?:true|false|null|none|required|optional|string|number)
    )$""")
_REDACTED = re.compile(r"\[REDACTED(?::[a-z_]+)?\]")

# Quick tests that rule out most texts before the dozen patterns above run (each a
# pass over the text; the assignment pattern alone costs several times the rest).
# Each is a necessary condition: a text they pass over has no finding.
# Every shape in _PATTERNS and _URL_CREDENTIAL starts with one of these strings:
_SHAPE_HINT = re.compile(r"-----BEGIN|A(?:KIA|SIA|BIA|CCA|GPA|IDA|ROA|NPA)|gh[pousr]_|github_pat_|"
                         r"gl(?:pat|dt|rt|ptt|cbt|oas)-|xox|://|sk-|[sr]k_(?:live|test)_|AIza|eyJ")
# An _ASSIGNMENT has a secret-like word followed (after more name characters, a quote,
# blanks) by its operator; matched on the lower-cased text, fast without re.IGNORECASE.
_ASSIGNMENT_HINT = re.compile(r"""(?:pass(?:word|wd|phrase)|pwd|secret|api[_\-]?key|apikey|access[_\-]?key|"""
                              r"""bearer|private[_\-]?key|token)[a-z0-9_\-]*["']?\s*(?:=|:(?!//))""")
# Letters re.IGNORECASE equates with ASCII ones that str.lower() does not turn into
# them (dotted and dotless i, long s): a text holding one is scanned in full.
_FOLDS_ODDLY = re.compile("[\u0130\u0131\u017f]")


@dataclass(frozen=True)
class Finding:
    """One suspected secret: its kind, where it is, and its span in the scanned text."""

    kind: str
    where: str   # "body", "frontmatter field 'x'", or "line N" of a file
    start: int
    end: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "where": self.where}


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _looks_random(value: str) -> bool:
    """A generic assignment's value that looks like a credential rather than a word."""
    if _PLACEHOLDER.match(value) or _REDACTED.search(value) or len(set(value)) < 6:
        return False
    classes = sum(bool(re.search(p, value)) for p in (r"[a-z]", r"[A-Z]", r"[0-9]", r"[^A-Za-z0-9]"))
    if classes < 2:
        return False
    entropy = _entropy(value)
    return entropy >= 3.5 or (classes >= 3 and entropy >= 3.0)


def _url_password(value: str) -> bool:
    """A URL password that is a real credential, not ``user:password@`` in an example."""
    if _PLACEHOLDER.match(value) or _WEAK_PLACEHOLDER.match(value) or _REDACTED.search(value):
        return False
    return len(value) >= 8 or _looks_random(value)


def scan_text(text: str, where: str = "body") -> list[Finding]:
    """Every suspected secret in ``text``, non-overlapping, in order."""
    if not _SHAPE_HINT.search(text) and not _FOLDS_ODDLY.search(text) \
            and not _ASSIGNMENT_HINT.search(text.lower()):
        return []
    found: list[Finding] = []
    taken: list[tuple[int, int]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in taken)

    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            if free(match.start(), match.end()):
                found.append(Finding(kind, where, match.start(), match.end()))
                taken.append((match.start(), match.end()))
    for match in _URL_CREDENTIAL.finditer(text):
        start, end = match.span("value")
        value = match.group("value")
        if free(start, end) and _url_password(value):
            found.append(Finding("url_credential", where, start, end))
            taken.append((start, end))
    for match in _ASSIGNMENT.finditer(text):
        start, end = match.span("value")
        if free(start, end) and _looks_random(match.group("value")):
            found.append(Finding("generic_secret", where, start, end))
            taken.append((start, end))
    return sorted(found, key=lambda f: f.start)


def redact_text(text: str, findings: list[Finding] | None = None) -> str:
    """``text`` with each finding replaced by ``[REDACTED:<kind>]``."""
    findings = scan_text(text) if findings is None else findings
    for finding in sorted(findings, key=lambda f: f.start, reverse=True):
        text = f"{text[:finding.start]}[REDACTED:{finding.kind}]{text[finding.end:]}"
    return text


def policy_of(config: Any) -> str:
    """The vault's ``secrets:`` setting (``refuse`` when unset)."""
    value = getattr(config, "extra", {}).get("secrets", "refuse")
    if value is False:  # YAML `secrets: off` is read as a string by gitmem, but be kind
        value = "allow"
    if value not in POLICIES:
        raise InvalidMetadata(f".gitmem.yaml: secrets must be one of {', '.join(POLICIES)}, got {value!r}")
    return str(value)


def _walk(value: Any, where: str, fix: bool, found: list[Finding], key: str = "") -> Any:
    """Scan (and with ``fix`` redact) every string inside a frontmatter value.

    A string is scanned as ``key: value`` so a field named like a secret
    (``api_key: ...``) counts as an assignment; only hits inside the value are kept.
    """
    if isinstance(value, str):
        prefix = f"{key}: " if key else ""
        hits = [Finding(f.kind, f.where, f.start - len(prefix), f.end - len(prefix))
                for f in scan_text(prefix + value, where) if f.start >= len(prefix)]
        found.extend(hits)
        return redact_text(value, hits) if fix and hits else value
    if isinstance(value, list):
        return [_walk(v, where, fix, found, key) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, where, fix, found, str(k)) for k, v in value.items()}
    return value


def screen(meta: Mapping[str, Any], body: str, policy: str) -> tuple[dict[str, Any], str]:
    """Apply ``policy`` to a memory about to be written; returns (meta, body) to write.

    Raises :class:`SecretDetected` under ``refuse`` when anything is found.
    """
    if policy == "allow":
        return dict(meta), body
    fix = policy == "redact"
    found: list[Finding] = []
    new_meta = {key: _walk(value, f"frontmatter field {key!r}", fix, found, key) for key, value in meta.items()}
    hits = scan_text(body, "body")
    found.extend(hits)
    if not found:
        return dict(meta), body
    # A title becomes the file name and the commit subject, which redaction cannot reach.
    if fix and not any(f.where == "frontmatter field 'title'" for f in found):
        return new_meta, redact_text(body, hits)
    kinds = sorted({f.kind for f in found})
    places = sorted({f.where for f in found})
    raise SecretDetected(
        f"refusing to write a memory that looks like it contains a secret ({', '.join(kinds)} in "
        f"{', '.join(places)}); git history keeps everything it is given",
        findings=[f.to_dict() for f in found])


_IDENTITY_HINT = ("Name the author without it (--author, author=, the agent's name, GITMEM_AUTHOR, or author: / "
                  "user: in .gitmem.yaml). A commit author cannot be redacted; only 'secrets: allow' in "
                  ".gitmem.yaml lets it through.")


def screen_identity(name: str, email: str, policy: str) -> None:
    """Refuse a commit author whose ``name`` or ``email`` looks like it holds a secret.

    Raises :class:`SecretDetected` under ``refuse`` and ``redact`` (an author cannot be
    redacted); ``allow`` lets everything through.  The message shows the identity with
    each secret replaced by ``[REDACTED:<kind>]``, never the secret."""
    if policy == "allow":
        return
    in_name, in_email = scan_text(name, "author name"), scan_text(email, "author email")
    if not in_name and not in_email:
        return
    found = in_name + in_email
    shown = f"{redact_text(name, in_name)} <{redact_text(email, in_email)}>"
    parts = [part for part, hits in (("name", in_name), ("email", in_email)) if hits]
    looks = "look like they contain" if len(parts) > 1 else "looks like it contains"
    kinds = sorted({f.kind for f in found})
    raise SecretDetected(
        f"refusing to commit as {shown}: the author's {' and '.join(parts)} {looks} a secret "
        f"({', '.join(kinds)}); git keeps every commit's author for good",
        hint=_IDENTITY_HINT, findings=[f.to_dict() for f in found])
