"""What a build of the project's Dockerfile reads: the context .dockerignore lets through, and the
key a build is stamped with.

The key decides whether a build runs at all (even a fully cached podman build re-copies the
trainer's venv to check its cache), so the context is worked out here as Docker's rules give it:
a file .dockerignore keeps out changes no key, and a file it lets through always does.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

from tfjob_testbed.core.paths import ROOT

# (negated, pattern, regex) of one .dockerignore line.
IgnorePattern = tuple[bool, str, re.Pattern[str]]


def build_key(target: str, tags: Sequence[str], base_id: str) -> str:
    """A digest of everything a build reads: same key, same image."""
    digest = hashlib.sha256(f"build v1\0{target}\0{' '.join(tags)}\0{base_id}\0".encode())
    for rel in ["Dockerfile", ".dockerignore", *context_files()]:
        path = ROOT / rel
        if path.is_symlink():
            content = os.readlink(path).encode()
        else:
            content = path.read_bytes() if path.exists() else b"(missing)"
        mode = path.lstat().st_mode if path.exists() or path.is_symlink() else 0
        digest.update(f"{rel}\0{mode:o}\0".encode())
        digest.update(hashlib.sha256(content).digest())
    return digest.hexdigest()


def context_files() -> list[str]:
    """Paths (relative, sorted) of the build context: what .dockerignore lets through."""
    patterns = dockerignore_patterns()
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = Path(dirpath).relative_to(ROOT)
        kept = []
        for name in sorted(dirnames):
            rel = (rel_dir / name).as_posix()
            if (ROOT / rel).is_symlink():
                filenames.append(name)  # os.walk does not follow it; the build copies the link
            elif not prunable(rel, patterns):
                kept.append(name)
        dirnames[:] = kept
        for name in filenames:
            rel = (rel_dir / name).as_posix()
            if not ignored(rel, patterns):
                found.append(rel)
    return sorted(found)


def dockerignore_patterns() -> list[IgnorePattern]:
    """(negated, pattern, regex) per .dockerignore line, in order: the last match wins."""
    path = ROOT / ".dockerignore"
    lines = path.read_text().splitlines() if path.exists() else []
    patterns = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).strip("/")
        patterns.append((negated, pattern, glob_regex(pattern)))
    return patterns


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore glob: * and ? stay within a path segment, ** crosses them."""
    out = ""
    for token in re.split(r"(\*\*/|\*\*|\*|\?|\[[^\]/]+\])", pattern):
        if token.startswith("[") and token.endswith("]"):
            body = token[1:-1]
            out += "[^" + re.escape(body[1:]) + "]" if body.startswith("^") else f"[{body}]"
        else:
            out += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
                token, re.escape(token)
            )
    return re.compile(out)


def ignored(rel: str, patterns: list[IgnorePattern]) -> bool:
    """Whether .dockerignore keeps `rel` out: a pattern matching it or a parent applies."""
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for negated, _, regex in patterns:
        if any(regex.fullmatch(c) for c in candidates):
            excluded = not negated
    return excluded


def prunable(rel_dir: str, patterns: list[IgnorePattern]) -> bool:
    """An ignored directory no `!pattern` could reach into: nothing under it is sent."""
    if not ignored(rel_dir, patterns):
        return False
    for negated, pattern, _ in patterns:
        literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
        if negated and (
            pattern.startswith(rel_dir + "/")
            or (literal != pattern and (rel_dir + "/").startswith(literal))
        ):
            return False
    return True
