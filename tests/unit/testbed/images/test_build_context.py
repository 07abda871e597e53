"""What a build of the Dockerfile reads, as Docker's .dockerignore rules give it: a file wrongly
counted in changes the build key for nothing, a file wrongly left out is never rebuilt for."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfjob_testbed.core.paths import ROOT as REAL_ROOT
from tfjob_testbed.images import build_context
from tfjob_testbed.images.build_context import (
    context_files,
    dockerignore_patterns,
    glob_regex,
    ignored,
    prunable,
)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty checkout: the module reads its .dockerignore and walks it."""
    monkeypatch.setattr(build_context, "ROOT", tmp_path)
    return tmp_path


def ignore(root: Path, text: str) -> None:
    (root / ".dockerignore").write_text(text)


def tree(root: Path, *files: str) -> None:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*", "README.md", True),
        ("*", "operator/api", False),  # * stays within a segment
        ("*.md", "docs/x.md", False),
        ("docs/*.md", "docs/x.md", True),
        ("**/__pycache__", "__pycache__", True),  # **/ also matches no directory at all
        ("**/__pycache__", "a/b/__pycache__", True),
        ("**/__pycache__", "a/b/__pycache__x", False),
        ("a/**", "a/b/c", True),  # ** crosses segments
        ("a/**/z", "a/z", True),
        ("a/**/z", "a/b/c/z", True),
        ("file?.txt", "file1.txt", True),
        ("file?.txt", "file/.txt", False),  # ? is never a separator
        ("**/*.py[cod]", "x/y.pyc", True),
        ("**/*.py[cod]", "x/y.pyx", False),
        ("x[^a].txt", "xb.txt", True),
        ("x[^a].txt", "xa.txt", False),
        ("*.egg-info", "tfjob_operator.egg-info", True),
        ("a.b", "aXb", False),  # a literal dot
        ("a+b", "a+b", True),  # regex characters taken literally
    ],
)
def test_glob_follows_dockers_rules(pattern: str, path: str, matches: bool) -> None:
    assert bool(glob_regex(pattern).fullmatch(path)) is matches


def test_patterns_are_parsed_in_order_without_comments_or_slashes(repo: Path) -> None:
    ignore(repo, "# a comment\n\n  *  \n!/operator/\n./docs//x\n!**/keep\n")
    patterns = [(negated, pattern) for negated, pattern, _ in dockerignore_patterns()]
    assert patterns == [(False, "*"), (True, "operator"), (False, "docs/x"), (True, "**/keep")]


def test_no_dockerignore_keeps_nothing_out(repo: Path) -> None:
    assert dockerignore_patterns() == []


ALLOWLIST = "*\n!operator\n!README.md\n**/__pycache__\n**/tests\n!operator/keep/tests\n"


@pytest.mark.parametrize(
    ("path", "kept_out"),
    [
        ("README.md", False),
        ("NOTES.md", True),
        ("operator", False),
        ("operator/a.py", False),  # let back in through its parent
        ("operator/__pycache__/a.pyc", True),  # a later pattern, through a parent
        ("operator/x/tests/t.py", True),
        ("operator/keep/tests/t.py", False),  # the last match wins
        ("tests/t.py", True),
        (".git/HEAD", True),
    ],
)
def test_the_last_matching_pattern_decides(repo: Path, path: str, kept_out: bool) -> None:
    ignore(repo, ALLOWLIST)
    assert ignored(path, dockerignore_patterns()) is kept_out


@pytest.mark.parametrize(
    ("text", "directory", "pruned"),
    [
        ("*\n!operator\n", "tests", True),
        ("*\n!operator\n", "operator", False),  # not ignored at all
        ("build\n!build/keep.txt\n", "build", False),  # a negation names a path inside
        ("build\n!bu*/keep.txt\n", "build", False),  # a wildcard negation may reach inside
        ("build\n!other/keep.txt\n", "build", True),
        ("**/.venv\n", "operator/.venv", True),
    ],
)
def test_a_directory_is_pruned_only_when_no_negation_reaches_into_it(
    repo: Path, text: str, directory: str, pruned: bool
) -> None:
    ignore(repo, text)
    assert prunable(directory, dockerignore_patterns()) is pruned


def test_the_context_is_what_dockerignore_lets_through(repo: Path) -> None:
    ignore(repo, ALLOWLIST)
    tree(
        repo,
        "README.md",
        "NOTES.md",
        "operator/b.py",
        "operator/a.py",
        "operator/__pycache__/a.pyc",
        "operator/x/tests/t.py",
        "operator/keep/tests/t.py",
        "tests/t.py",
    )
    assert context_files() == [
        "README.md",
        "operator/a.py",
        "operator/b.py",
        "operator/keep/tests/t.py",
    ]


def test_a_linked_directory_is_sent_as_the_link(repo: Path) -> None:
    ignore(repo, "*\n!operator\n")
    tree(repo, "operator/real/a.py")
    (repo / "operator" / "link").symlink_to("real")
    assert context_files() == ["operator/link", "operator/real/a.py"]


def test_the_build_key_changes_with_a_file_in_the_context_only(repo: Path) -> None:
    ignore(repo, "*\n!operator\n")
    tree(repo, "Dockerfile", "operator/a.py", "tests/t.py")
    key = build_context.build_key("operator", ["repo/operator:1"], "base")
    (repo / "tests" / "t.py").write_text("changed")
    assert build_context.build_key("operator", ["repo/operator:1"], "base") == key
    (repo / "operator" / "a.py").write_text("changed")
    assert build_context.build_key("operator", ["repo/operator:1"], "base") != key


@pytest.mark.parametrize(
    ("target", "tags", "base_id"),
    [("trainer", ["repo/operator:1"], "base"), ("operator", ["repo/operator:2"], "base"),
     ("operator", ["repo/operator:1"], "other")],
)  # fmt: skip
def test_the_build_key_changes_with_the_target_tags_and_base(
    repo: Path, target: str, tags: list[str], base_id: str
) -> None:
    tree(repo, "Dockerfile")
    key = build_context.build_key("operator", ["repo/operator:1"], "base")
    assert build_context.build_key(target, tags, base_id) != key


def _expected_real_context() -> list[str]:
    """The repository's context by its .dockerignore read by hand: the three packages and two
    files at the top, without tests, caches, bytecode or build leftovers."""
    dropped_dirs = {"__pycache__", ".pytest_cache", ".ruff_cache", ".venv", ".git", "tests"}
    found = ["README.md", "pyproject.toml"]
    for top in ("operator", "trainer", "protocol"):
        for path in (REAL_ROOT / top).rglob("*"):
            rel = path.relative_to(REAL_ROOT)
            if any(p in dropped_dirs or p.endswith(".egg-info") for p in rel.parts[:-1]):
                continue
            if path.is_file() and path.suffix not in (".pyc", ".pyo", ".pyd"):
                found.append(rel.as_posix())
    return sorted(found)


def test_the_real_context_is_what_the_repositorys_dockerignore_lets_through() -> None:
    files = context_files()
    assert files == _expected_real_context()
    assert "operator/tfjob_operator/__init__.py" in files
    for left_out in ("tests/", "testbed/", "docs/", ".git/", ".venv/", "charts/", "__pycache__"):
        assert not [f for f in files if left_out in f], left_out
