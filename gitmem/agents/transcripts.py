"""The last user/assistant turns of a coding agent's session transcript, in each agent's format.

* ``claude``: Claude Code's JSONL, one ``{"type": "user"|"assistant", "message": {"role",
  "content"}}`` object a line (meta and sidechain entries skipped).
* ``cursor``: Cursor's JSONL, ``{"role": "user"|"assistant", "message": {"content": [...]}}``
  a line; a user's text comes wrapped in ``<user_query>`` (after an optional
  ``<timestamp>``), which is taken off.
* ``codex``: a Codex rollout, JSONL of ``{"timestamp", "type", "payload"}`` lines; the
  turns are the ``response_item`` messages (``input_text`` / ``output_text`` parts) whose
  text is not context Codex injected itself (``<environment_context>``, ``AGENTS.md``
  instructions ...); a rollout holding none gives its ``user_message`` / ``agent_message``
  events instead.
* ``gemini``: Gemini CLI's session file: one JSON document ``{"sessionId", ...,
  "messages": [...]}`` (older releases) or JSONL records (newer ones: a metadata line,
  one line per message, where a later line with the same ``id`` replaces the earlier one,
  ``{"$rewindTo": id}`` dropping that message and all after it, ``{"$set": {"messages":
  [...]}}`` a checkpoint).  Messages of type ``user`` and ``gemini`` count; thoughts,
  tool calls and info/error lines do not.

Only text is kept: no tool calls, tool output, thinking or images.  Only the end of a
JSONL file is read (it can be hundreds of megabytes).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, NotFound

__all__ = ["transcript_turns", "TRANSCRIPT_FORMATS", "find_cursor_transcript", "TRANSCRIPT_TAIL_BYTES"]

#: Only the end of a transcript is read: it can be hundreds of megabytes.
TRANSCRIPT_TAIL_BYTES = 4 * 1024 * 1024
#: A Gemini session file that is one JSON document is read whole up to this size.
JSON_DOCUMENT_MAX_BYTES = 32 * 1024 * 1024

Turns = list[tuple[str, str]]

_CLAUDE_NOISE = re.compile(r"^\s*<(command-name|command-message|command-args|local-command-stdout|"
                           r"local-command-stderr|system-reminder|user-prompt-submit-hook)>")
# Context Codex sends as a user message of its own: a whole message in one tag, or the
# project's AGENTS.md.
_CODEX_INJECTED = re.compile(r"^\s*(<(?P<tag>[\w -]+)>.*</(?P=tag)>\s*$|# AGENTS\.md instructions\b)", re.S)
_CURSOR_QUERY = re.compile(r"^\s*(?:<timestamp>.*?</timestamp>\s*)?<user_query>\s*(?P<text>.*?)\s*</user_query>\s*$",
                           re.S)


def _blocks_text(content: Any, kinds: Iterable[str] = ("text",)) -> str:
    """The readable text of a message's content: a string, or the text blocks of a list
    (blocks of other kinds, such as tool calls, tool results, thinking and images, are
    left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        wanted = set(kinds)
        return "\n".join(block["text"] for block in content
                         if isinstance(block, dict) and block.get("type") in wanted
                         and isinstance(block.get("text"), str))
    return ""


def _json_lines(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            yield entry


def _claude(lines: list[str]) -> Turns:
    turns = []
    for entry in _json_lines(lines):
        if entry.get("isMeta") or entry.get("isSidechain"):
            continue
        message = entry.get("message")
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if entry.get("type") not in ("user", "assistant") or role not in ("user", "assistant"):
            continue
        text = _blocks_text(message.get("content")).strip()
        if text and not _CLAUDE_NOISE.match(text):
            turns.append((role, text))
    return turns


def _cursor(lines: list[str]) -> Turns:
    turns = []
    for entry in _json_lines(lines):
        message = entry.get("message")
        role = entry.get("role") or (message.get("role") if isinstance(message, dict) else None)
        if role not in ("user", "assistant") or not isinstance(message, dict):
            continue
        text = _blocks_text(message.get("content")).strip()
        if role == "user":
            query = _CURSOR_QUERY.match(text)
            text = query.group("text").strip() if query else text
        if text:
            turns.append((role, text))
    return turns


def _codex(lines: list[str]) -> Turns:
    items, events = [], []
    for entry in _json_lines(lines):
        kind, payload = entry.get("type"), entry.get("payload")
        if kind == "message" and "role" in entry:   # an early rollout: the item itself is the line
            kind, payload = "response_item", entry
        if not isinstance(payload, dict):
            continue
        if kind == "response_item" and payload.get("type") == "message":
            role = payload.get("role")
            text = _blocks_text(payload.get("content"), ("input_text", "output_text", "text")).strip()
            if role in ("user", "assistant") and text and not (role == "user" and _CODEX_INJECTED.match(text)):
                items.append((role, text))
        elif kind == "event_msg" and payload.get("type") in ("user_message", "agent_message"):
            said = payload.get("message")
            if isinstance(said, str) and said.strip():
                events.append(("user" if payload["type"] == "user_message" else "assistant", said.strip()))
    return items or events


def _gemini_text(message: dict[str, Any]) -> str:
    content = message.get("displayContent") or message.get("content")
    parts = content if isinstance(content, list) else [content]
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought"):
            texts.append(part["text"])
    return "\n".join(texts).strip()


def _gemini_messages(text: str, lines: list[str]) -> list[Any]:
    """A Gemini session file's messages, in order: the document's ``messages``, or the
    JSONL records replayed as Gemini CLI replays them."""
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        return document["messages"]
    messages: dict[str, Any] = {}
    for record in _json_lines(lines):
        if isinstance(record.get("$rewindTo"), str):
            ids = list(messages)
            cut = ids.index(record["$rewindTo"]) if record["$rewindTo"] in messages else 0
            for key in ids[cut:]:
                del messages[key]
        elif isinstance(record.get("$set"), dict):
            if isinstance(record["$set"].get("messages"), list):
                messages = {str(m.get("id", i)): m for i, m in enumerate(record["$set"]["messages"])
                            if isinstance(m, dict)}
        elif isinstance(record.get("id"), str) and "type" in record:
            messages[record["id"]] = record   # a later line of the same message replaces it, in place
        elif isinstance(record.get("messages"), list):   # a whole record on one line
            messages.update({str(m.get("id", i)): m for i, m in enumerate(record["messages"])
                             if isinstance(m, dict)})
    return list(messages.values())


def _gemini(lines: list[str], text: str) -> Turns:
    turns = []
    for message in _gemini_messages(text, lines):
        if not isinstance(message, dict) or message.get("type") not in ("user", "gemini"):
            continue
        said = _gemini_text(message)
        if said:
            turns.append(("user" if message["type"] == "user" else "assistant", said))
    return turns


_READERS: dict[str, Callable[[list[str], str], Turns]] = {
    "claude": lambda lines, text: _claude(lines),
    "cursor": lambda lines, text: _cursor(lines),
    "codex": lambda lines, text: _codex(lines),
    "gemini": _gemini,
}
TRANSCRIPT_FORMATS = tuple(_READERS)


def transcript_turns(path: str | os.PathLike[str], *, fmt: str = "claude", max_turns: int = 10,
                     turn_chars: int = 1200) -> Turns:
    """The last ``max_turns`` user/assistant text messages of the transcript at ``path``
    (in format ``fmt``, one of :data:`TRANSCRIPT_FORMATS`) as ``(role, text)``, each
    clipped to ``turn_chars``.  Lines that are not JSON or not messages are skipped."""
    if fmt not in _READERS:
        raise InvalidInput(f"unknown transcript format {fmt!r}", hint=f"Use one of: {', '.join(_READERS)}.")
    file = Path(path).expanduser()
    if not file.is_file():
        raise NotFound(f"transcript {file} does not exist")
    with file.open("rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        whole = fmt == "gemini" and size <= JSON_DOCUMENT_MAX_BYTES
        handle.seek(0 if whole else max(0, size - TRANSCRIPT_TAIL_BYTES))
        data = handle.read()
    text = data.decode("utf-8", "replace")
    lines = text.splitlines()
    if size > len(data):
        lines = lines[1:]  # the first line read is probably cut
    turns = []
    for role, said in _READERS[fmt](lines, text):
        if len(said) > turn_chars:
            said = said[:turn_chars].rstrip() + " [...]"
        turns.append((role, said))
    return turns[-max_turns:]


def find_cursor_transcript(session: str, home: Path | None = None) -> Path | None:
    """Cursor's transcript of conversation ``session`` when its hook gave no path (the
    Cursor CLI sends ``transcript_path: null``): ``~/.cursor/projects/<project>/
    agent-transcripts/<id>.jsonl`` (the CLI's layout) or ``.../<id>/<id>.jsonl`` (the
    editor's).  None when there is none (or the id could name another file)."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", session) or session.startswith("."):
        return None
    projects = (home or Path.home()) / ".cursor" / "projects"
    found = [p for pattern in (f"*/agent-transcripts/{session}.jsonl", f"*/agent-transcripts/{session}/{session}.jsonl")
             for p in projects.glob(pattern) if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime_ns) if found else None
