"""The control plane's certificates and keys, made with the openssl CLI."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

from tfjob_testbed.controlplane.errors import ControlPlaneError


class Pki:
    """Certificates and keys made with the openssl CLI (no Python crypto dependency)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def _openssl(self, *args: str) -> None:
        proc = subprocess.run(["openssl", *args], capture_output=True, text=True, cwd=self.dir)
        if proc.returncode != 0:
            raise ControlPlaneError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")

    def _ec_key(self, name: str) -> Path:
        key = self.dir / f"{name}.key"
        self._openssl(
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key)
        )
        return key

    def ca(self, name: str, cn: str) -> tuple[Path, Path]:
        key = self._ec_key(name)
        crt = self.dir / f"{name}.crt"
        self._openssl(
            "req", "-x509", "-new", "-key", str(key), "-out", str(crt), "-days", "3650",
            "-subj", f"/CN={cn}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        )  # fmt: skip
        return crt, key

    def leaf(
        self,
        name: str,
        subject: str,
        ca: tuple[Path, Path],
        *,
        client: bool = False,
        sans: list[str] | None = None,
    ) -> tuple[Path, Path]:
        """Issue a server (with SANs) or client certificate signed by ``ca``."""
        key = self._ec_key(name)
        csr = self.dir / f"{name}.csr"
        crt = self.dir / f"{name}.crt"
        ext = self.dir / f"{name}.ext"
        lines = [
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={'clientAuth' if client else 'serverAuth'}",
        ]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        self._openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", subject)
        self._openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
            "-set_serial", "0x" + secrets.token_hex(16), "-days", "3650", "-sha256",
            "-extfile", str(ext), "-out", str(crt),
        )  # fmt: skip
        csr.unlink()
        ext.unlink()
        return crt, key

    def rsa_key_pair(self, name: str) -> tuple[Path, Path]:
        """RSA pair for service-account tokens (RS256 is what every client expects)."""
        key = self.dir / f"{name}.key"
        pub = self.dir / f"{name}.pub"
        self._openssl(
            "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key)
        )
        self._openssl("pkey", "-in", str(key), "-pubout", "-out", str(pub))
        return pub, key
