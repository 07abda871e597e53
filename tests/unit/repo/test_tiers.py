"""`make test` keeps, in the passes it trims, the tests marked `smoke`; docs/development.md says
which test covers which capability. The two agree: every smoke test is in the section's tables,
and every test those tables name is marked `smoke` (itself, or one of its parameters).

Read from the test modules' source, not by collecting them: collection imports TensorFlow and
the Kubernetes client for every module, seconds of a unit test's time.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DEVELOPMENT = ROOT / "docs" / "development.md"
TRIMMED = ("tests/trainer", "tests/integration", "tests/node", "tests/e2e")
SECTION = "### Each capability and the `make test` test that covers it"
TEST_ID = re.compile(r"`(tests/[\w/]+\.py::\w+)(?:\[[^`]*\])?`")


def is_smoke(node: ast.expr) -> bool:
    """`pytest.mark.smoke`, as a decorator or a parameter's mark (alone or in a list)."""
    if isinstance(node, ast.List | ast.Tuple):
        return any(is_smoke(e) for e in node.elts)
    return ast.unparse(node) == "pytest.mark.smoke"


def smoke_params(decorator: ast.expr) -> bool:
    """A `pytest.mark.parametrize` whose list holds a `pytest.param(..., marks=smoke)`."""
    return any(
        isinstance(n, ast.Call)
        and ast.unparse(n.func) == "pytest.param"
        and any(k.arg == "marks" and is_smoke(k.value) for k in n.keywords)
        for n in ast.walk(decorator)
    )


def smoke_tests() -> set[str]:
    found = set()
    for folder in TRIMMED:
        for path in sorted((ROOT / folder).rglob("test_*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            whole = any(
                isinstance(n, ast.Assign)
                and any(ast.unparse(t) == "pytestmark" for t in n.targets)
                and is_smoke(n.value)
                for n in tree.body
            )
            for node in tree.body:
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                if not node.name.startswith("test_"):
                    continue
                if whole or any(is_smoke(d) or smoke_params(d) for d in node.decorator_list):
                    found.add(f"{path.relative_to(ROOT)}::{node.name}")
    return found


def documented() -> set[str]:
    text = DEVELOPMENT.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start)
    return set(TEST_ID.findall(text[start : end if end >= 0 else None]))


def test_the_docs_name_every_smoke_test_and_only_those():
    smoke, named = smoke_tests(), documented()
    assert smoke, "no test is marked smoke: the parser no longer reads the marks"
    assert not smoke - named, f"marked smoke, not in {DEVELOPMENT.name}: {sorted(smoke - named)}"
    assert not named - smoke, f"in {DEVELOPMENT.name}, not marked smoke: {sorted(named - smoke)}"


def test_every_trimmed_pass_keeps_a_test():
    """A pass `make test` trims to nothing would pass with no test run."""
    smoke = smoke_tests()
    for folder in TRIMMED:
        assert any(t.startswith(folder + "/") for t in smoke), folder
