"""The layout's rules, held by reading the tree.

One name for one thing: across the operator, the trainer, the shared protocol and the test bed,
no two modules share a file name, no module is named like a package folder, and no class name is
defined twice; no two files of the test suite share a name. A name found once is found where it
is meant, by search or by an import, without asking which of several.

No function outside the tests is longer than a screenful and a half (LONGEST lines): a longer
one holds several steps that want names of their own."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = (
    "operator/tfjob_operator",
    "trainer/tfjob_trainer",
    "protocol/tfjob_protocol",
    "testbed/tfjob_testbed",
)
# Python's own names: a package's marker and its `python -m` entry point.
PYTHONS_OWN = {"__init__.py", "__main__.py"}
TESTS_OWN = {"__init__.py", "conftest.py"}
LONGEST = 100


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in _files(ROOT / pkg) if p.name not in PYTHONS_OWN]


def _repeated(paths_by_name: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: paths for name, paths in sorted(paths_by_name.items()) if len(paths) > 1}


def _by_file_name(paths: list[Path]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        found[path.name].append(path.relative_to(ROOT).as_posix())
    return found


def _folders() -> set[str]:
    return {
        p.name
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*")
        if p.is_dir() and p.name != "__pycache__"
    }


def _classes(paths: list[Path], root: Path = ROOT) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return found


def test_no_two_modules_share_a_file_name() -> None:
    repeated = _repeated(_by_file_name(_modules()))
    assert not repeated, f"modules named alike; name each for what it holds: {repeated}"


def test_no_module_is_named_like_a_folder() -> None:
    clashes = sorted(p.relative_to(ROOT).as_posix() for p in _modules() if p.stem in _folders())
    assert not clashes, f"modules named like a package folder: {clashes}"


def test_no_class_name_is_defined_twice() -> None:
    every = [p for pkg in PACKAGES for p in _files(ROOT / pkg)]
    repeated = _repeated(_classes(every))
    assert not repeated, f"classes of one name in several places: {repeated}"


def test_no_two_test_files_share_a_name() -> None:
    tests = [p for p in _files(ROOT / "tests") if p.name not in TESTS_OWN]
    repeated = _repeated(_by_file_name(tests))
    assert not repeated, f"test files named alike; name each for its module or scenario: {repeated}"


def _long_functions(paths: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONGEST:
                    where = path.relative_to(root).as_posix()
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_outside_the_tests_is_over_the_longest() -> None:
    code = [p for pkg in PACKAGES for p in _files(ROOT / pkg)] + _files(ROOT / "benchmarks")
    long = _long_functions(code)
    assert not long, f"functions over {LONGEST} lines; split them into named steps: {long}"


def test_a_long_function_is_found(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(LONGEST))
    source.write_text(f"def short():\n    pass\n\nasync def long():\n{body}")
    assert _long_functions([source], tmp_path) == [f"m.py:4 long ({LONGEST + 1} lines)"]


@pytest.mark.parametrize(
    ("names", "repeated"),
    [
        ({"a.py": ["x/a.py"], "b.py": ["y/b.py"]}, {}),
        ({"a.py": ["x/a.py", "y/a.py"], "b.py": ["y/b.py"]}, {"a.py": ["x/a.py", "y/a.py"]}),
    ],
)
def test_repeats_are_what_is_found_twice(
    names: dict[str, list[str]], repeated: dict[str, list[str]]
) -> None:
    assert _repeated(names) == repeated


def test_classes_are_found_nested_too(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("class A:\n    class B: ...\n\nclass C: ...\n")
    assert sorted(_classes([source], tmp_path)) == ["A", "B", "C"]
