"""The stand-in base: debootstrap reads the host's own Debian mirror, so that it goes where apt
already reaches; and the recipe the base is stamped with names everything that decides it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfjob_testbed.images import debian_base

BOOKWORM = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
SECURITY = "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n"


@pytest.mark.parametrize(
    ("sources", "mirror"),
    [
        (None, debian_base.DEFAULT_MIRROR),  # no deb822 sources at all
        (BOOKWORM, "http://mirror.example/debian"),
        (f"{SECURITY}\n{BOOKWORM}", "http://mirror.example/debian"),  # the block for the suite
        (SECURITY, debian_base.DEFAULT_MIRROR),  # no block for the suite
        (BOOKWORM.replace("bookworm ", "trixie "), debian_base.DEFAULT_MIRROR),
        ("Types: deb\nURIs: http://a.example/d http://b.example/d\nSuites: bookworm\n",
         "http://a.example/d"),  # the first of several
        ("Suites: bookworm\nComponents: main\n", debian_base.DEFAULT_MIRROR),  # no URIs
    ],
)  # fmt: skip
def test_debootstrap_uses_the_hosts_mirror_for_the_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sources: str | None, mirror: str
) -> None:
    path = tmp_path / "debian.sources"
    if sources is not None:
        path.write_text(sources)
    monkeypatch.setattr(debian_base, "DEBIAN_SOURCES", path)
    assert debian_base._mirror() == mirror


def test_the_recipe_names_all_that_decides_the_base() -> None:
    recipe = debian_base.BASE_RECIPE.splitlines()
    assert {debian_base.BASE_SUITE, "minbase", debian_base.BASE_PACKAGES} <= set(recipe)
    assert [line for line in recipe if line in debian_base.BASE_CHANGES] == list(
        debian_base.BASE_CHANGES
    )
