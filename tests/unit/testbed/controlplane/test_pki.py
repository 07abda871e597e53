"""The plane's certificates, checked by openssl itself: a leaf verifies against its CA, with the
usage and names it was issued for."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tfjob_testbed.controlplane.pki import Pki


def _openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize(
    ("client", "sans", "usage"),
    [
        (False, ["IP:127.0.0.1", "DNS:localhost"], "TLS Web Server Authentication"),
        (True, None, "TLS Web Client Authentication"),
    ],
)
def test_a_leaf_verifies_against_its_ca_with_its_usage_and_names(
    tmp_path: Path, client: bool, sans: list[str] | None, usage: str
) -> None:
    pki = Pki(tmp_path)
    ca = pki.ca("ca", "test-ca")
    crt, key = pki.leaf("leaf", "/CN=leaf", ca, client=client, sans=sans)
    assert _openssl("verify", "-CAfile", str(ca[0]), str(crt)).strip() == f"{crt}: OK"
    text = _openssl("x509", "-in", str(crt), "-noout", "-text")
    assert usage in text
    assert ("IP Address:127.0.0.1, DNS:localhost" in text) == bool(sans)
    assert key.is_file() and not (tmp_path / "leaf.csr").exists()


def test_the_service_account_pair_is_rsa(tmp_path: Path) -> None:
    pub, key = Pki(tmp_path).rsa_key_pair("sa")
    assert "Public-Key: (2048 bit)" in _openssl(
        "pkey", "-pubin", "-in", str(pub), "-noout", "-text"
    )
    assert key.is_file()
