"""Secrets in memory content: refused by default, redacted or allowed by configuration."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from click.testing import CliRunner

from gitmem import Vault
from gitmem.cli.main import cli
from gitmem.errors import GitmemError
from gitmem.memory.secrets import redact_text, scan_text

from .conftest import snapshot

# Built from pieces so this file itself does not look like it leaks keys.
SECRETS = {
    "aws_access_key": "AKIA" + "IOSFODNN7" + "EXAMPLE",
    "github_token": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "gitlab_token": "glpat-" + "xYz12345678901234567",
    "slack_token": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "slack_webhook": "https://hooks.slack.com/services/" + "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "openai_key": "sk-" + "proj-abcDEF1234567890ghijKLMNOP",
    "anthropic_key": "sk-ant-" + "api03-abcdefghijklmnopqrstuvwxyz0123456789_-ABCD",
    "google_api_key": "AIza" + "SyA1234567890abcdefghijklmnopqrstuv",
    "stripe_key": "sk_" + "live_4eC39HqLyjWDarjtT1zdp7dc",
    "private_key": "-----BEGIN " + "RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0."
           "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
}
ASSIGNMENTS = ["password=" + "S3cr3t!Passw0rd", 'api_key: "' + "9f86d081884c7d659a2feaa0c55ad015" + '"',
               "client_secret = " + "Zx8#kQ2!vL9@wP4$", '{"auth_token": "' + "b3f1c9e2a7d44e0f9a1b2c3d4e5f6a7b" + '"}']
PROSE = [
    "The password policy requires 12 characters and a symbol.",
    "Rotate the API key every 90 days; the token: see the team vault entry.",
    "api_key = os.environ['OPENAI_API_KEY']",
    "password: <your-password>",
    "secret: ${DB_PASSWORD}",
    "Use sk-learn? No: scikit-learn.",
    "max_tokens: 4096, tokenizer: bert-base-uncased",
    "commit 9f86d081884c7d659a2feaa0c55ad015 fixed the flaky test",
    "id: 3b9b7159-f5f3-46f7-9de1-cd9cb970c2c3",
    "password: correcthorsebatterystaple",
    "The access token expires after one hour.",
    "AKIA is the prefix of AWS access key ids.",
    "Auth token: provided by the login endpoint.",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----",
    "See https://docs.github.com/en/authentication about ghp_ tokens.",
    "token=[REDACTED:github_token]",
    "Meeting with Priya about the Q3 budget; she prefers dark mode in VS Code.",
]


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_provider_format_is_found_and_redacted(kind: str) -> None:
    text = f"Deploy notes.\nThe value is {SECRETS[kind]} (from the console).\n"
    assert [f.kind for f in scan_text(text)] == [kind]
    redacted = redact_text(text)
    assert f"[REDACTED:{kind}]" in redacted and SECRETS[kind] not in redacted
    assert redacted.startswith("Deploy notes.\nThe value is ")


@pytest.mark.parametrize("text", ASSIGNMENTS)
def test_generic_assignments_with_random_values_are_found(text: str) -> None:
    assert [f.kind for f in scan_text(text)] == ["generic_secret"]


@pytest.mark.parametrize("text", PROSE)
def test_ordinary_prose_and_placeholders_are_not_flagged(text: str) -> None:
    assert scan_text(text) == []


def test_sample_vault_has_no_false_positives() -> None:
    sample = Path(__file__).resolve().parent.parent / "sample-vault"
    flagged = {p.name: scan_text(p.read_text()) for p in sample.rglob("*.md")}
    assert {k: v for k, v in flagged.items() if v} == {}


def set_policy(root: Path, policy: str) -> None:
    config = root / ".gitmem.yaml"
    config.write_text(config.read_text() + f"secrets: {policy}\n")


def test_default_refuses_with_a_clear_error_and_changes_nothing(vault: Vault) -> None:
    keeper = vault.add("keeper", "fine\n")
    before = snapshot(vault.root)
    for call in (lambda: vault.add("deploy", f"key {SECRETS['aws_access_key']}\n"),
                 lambda: vault.add("deploy", "x", source=SECRETS["github_token"]),
                 lambda: vault.add("deploy", "x", custom={"api_key": "9f86d081884c7d659a2feaa0c55ad015"}),
                 lambda: vault.update(keeper.id, append=SECRETS["private_key"])):
        with pytest.raises(GitmemError) as info:
            call()
        err = info.value
        assert err.code == "secret_detected" and err.exit_code == 2
        assert "secret" in err.message and "redact" in (err.hint or "")
        assert all(s not in err.message + str(err.to_dict()) for s in SECRETS.values())
    assert snapshot(vault.root) == before


def test_redact_policy_replaces_the_secret(tmp_path: Path) -> None:
    root = tmp_path / "v"
    Vault.init(root).close()
    set_policy(root, "redact")
    with Vault.open(root) as v:
        m = v.add("deploy", f"key {SECRETS['stripe_key']} and password={'S3cr3t!Passw0rd'}\n",
                  source=SECRETS["slack_token"])
        text = (root / m.path).read_text()
        assert "[REDACTED:stripe_key]" in text and "[REDACTED:generic_secret]" in text
        assert m.meta["source"] == "[REDACTED:slack_token]"
        assert SECRETS["stripe_key"] not in text and "S3cr3t" not in text
        # A title becomes a file name and a commit subject: redaction cannot reach those.
        with pytest.raises(GitmemError) as info:
            v.add(f"key {SECRETS['aws_access_key']}", "x")
        assert info.value.code == "secret_detected"


def test_allow_policy_stores_as_given_and_bad_values_are_reported(tmp_path: Path) -> None:
    root = tmp_path / "v"
    Vault.init(root).close()
    set_policy(root, "allow")
    with Vault.open(root) as v:
        m = v.add("deploy", f"key {SECRETS['aws_access_key']}\n")
        assert SECRETS["aws_access_key"] in (root / m.path).read_text()
    set_policy(root, "maybe")
    with Vault.open(root) as v, pytest.raises(GitmemError) as info:
        v.add("deploy 2", "x")
    assert info.value.code == "invalid_metadata" and "secrets" in info.value.message


def test_cli_refusal_is_one_line_with_a_hint(vault: Vault) -> None:
    root = str(vault.root)
    vault.close()
    out = CliRunner().invoke(cli, ["--vault", root, "add", "deploy", f"use {SECRETS['openai_key']}"])
    assert out.exit_code == 2
    assert "error: refusing to write a memory that looks like it contains a secret (openai_key in body)" \
        in out.output
    assert "hint:" in out.output and "Traceback" not in out.output


_PIECES = [*SECRETS.values(), *ASSIGNMENTS, *PROSE, "PASSWORD", "Token", "\u0131", "\u017f", "\u0130", "K",
           "=", ": ", "://", "user:", "@host", " ", "\n", "'", '"', "paſſword=", "TOKEN = ", "x9#Lm2!qR7$v"]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=12), max_size=12).map("".join))
def test_the_quick_tests_never_hide_a_finding(text: str) -> None:
    """scan_text skips the full scan only for texts where it would find nothing."""
    from gitmem.memory import secrets
    quick = scan_text(text)
    with pytest.MonkeyPatch.context() as patch:  # hints that match everything: always the full scan
        patch.setattr(secrets, "_SHAPE_HINT", re.compile(""))
        full = scan_text(text)
    assert quick == full
