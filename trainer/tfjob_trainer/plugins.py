"""Users' own code in the trainer: `--model`, `--input` and `--eval-input` name a function as
`package.module:function`, and `--model-arg` / `--input-arg` give it keyword arguments.

Everything that can be checked before TensorFlow trains is checked here, and a mistake is a
`UsageError` (exit 2, one line naming the flag, the function and what is wrong). What the
user's own code raises once it runs is theirs, and keeps its traceback.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import UsageError

# The built-in models, users of the same interface as anyone's.
BUILTIN_MODELS = {"mlp": "tfjob_trainer.model:mlp", "cnn": "tfjob_trainer.model:cnn"}


def parse_args(flag: str, pairs: Sequence[str]) -> dict[str, Any]:
    """`key=value` pairs into keyword arguments; a value that parses as JSON is taken as such
    (`units=64`, `rate=0.1`, `shuffle=true`, `sizes=[64,32]`), anything else is a string."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise UsageError(f"--{flag} {pair!r}: expected key=value, with key a Python name")
        try:
            kwargs[key] = json.loads(raw)
        except ValueError:
            kwargs[key] = raw
    return kwargs


def split_env_args(value: str | None) -> list[str]:
    """`TFJOB_MODEL_ARGS="units=64 rate=0.1"`: space-separated pairs, as a pod's env holds them."""
    return value.split() if value else []


@dataclass(frozen=True)
class Plugin:
    """A user's function, resolved, with the keyword arguments the trainer will pass it."""

    flag: str
    spec: str
    function: Callable[..., Any]
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, *args: Any) -> Any:
        return self.function(*args, **self.kwargs)

    def __str__(self) -> str:
        return f"--{self.flag} {self.spec}"


def load(flag: str, spec: str) -> Callable[..., Any]:
    """The function `spec` names (`package.module:function`); its module is imported now."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise UsageError(
            f"--{flag} {spec!r}: expected package.module:function, e.g. mypkg.models:build"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name and module_name.startswith(e.name):
            where = ", ".join(p for p in sys.path if p) or "(empty)"
            raise UsageError(
                f"--{flag} {spec}: no module named {e.name!r} (is its package installed or on "
                f"PYTHONPATH? searched {where})"
            ) from None
        # The module is there but imports what is not (a dependency missing from the image).
        raise UsageError(f"--{flag} {spec}: importing {module_name} failed: {e}") from None
    except SyntaxError as e:
        raise UsageError(
            f"--{flag} {spec}: {module_name} does not compile: {e.msg} ({e.filename}, line "
            f"{e.lineno})"
        ) from None
    function = module
    for part in name.split("."):
        if not hasattr(function, part):
            public = sorted(n for n in vars(module) if not n.startswith("_"))
            raise UsageError(
                f"--{flag} {spec}: {module_name} has no {name!r} (it has: "
                f"{', '.join(public) or 'nothing public'})"
            )
        function = getattr(function, part)
    if not callable(function):
        raise UsageError(f"--{flag} {spec}: {name} is a {type(function).__name__}, not a function")
    return function


def bind(
    flag: str,
    spec: str,
    given: Mapping[str, Any],
    *,
    offered: Mapping[str, Any] | None = None,
    positional: int = 0,
    args_flag: str | None = None,
    shared: bool = False,
) -> Plugin:
    """Resolve `spec` and check its signature: every key of `given` (from `--<args_flag>`)
    must be a parameter; each of `offered` (what the trainer knows, e.g. `batch_size`) is
    passed when the function has a parameter of that name and `given` does not set it; the
    function must take `positional` arguments before them (an InputContext for inputs).
    `shared`: `given` serves another function too, and this one takes only the keys it names."""
    function = load(flag, spec)
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return Plugin(flag, spec, function, {**(offered or {}), **({} if shared else given)})
    params = list(signature.parameters.values())
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    leading = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
    if positional and len(leading) < positional and not takes_varargs:
        raise UsageError(
            f"--{flag} {spec}: it must take a tf.distribute.InputContext as its first argument "
            f"(its signature is {signature})"
        )
    named -= {p.name for p in leading[:positional]}
    if shared:
        given = {k: v for k, v in given.items() if k in named}
    for key in given:
        if key not in named and not var_kw:
            raise UsageError(
                f"--{args_flag or flag} {key}=...: {spec} takes no argument {key!r} (it takes: "
                f"{', '.join(sorted(named)) or 'none'})"
            )
    kwargs = {k: v for k, v in (offered or {}).items() if (k in named or var_kw) and k not in given}
    kwargs.update(given)
    missing = [
        p.name
        for p in params[positional:]
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.default is p.empty
        and p.name not in kwargs
    ]
    if missing:
        hint = f"--{args_flag} {missing[0]}=..." if args_flag else "a default"
        raise UsageError(
            f"--{flag} {spec}: no value for its argument(s) {', '.join(missing)} ({hint})"
        )
    return Plugin(flag, spec, function, kwargs)
