"""Every public class and function of the official package exists at its official path with a
compatible call signature (`tests/official_api.tsv`, generated from the official code).

Compatible means that every call written against the official signature binds the same way here:
the official parameters keep their names, kinds and order, an official default is kept, and any
extra parameter has a default and comes after the official positional ones (or is keyword-only).
Two deliberate differences: a `device` default may differ (the official default is often CUDA;
here it is one that works on every machine), and an official parameter without a default may gain
one. A class listed with `(/, *args, **kwargs)` is an abstract base with no constructor of its
own: only its existence and methods are checked.
"""
import ast
import importlib
import inspect
import re
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

LISTING = Path(__file__).with_name("official_api.tsv")
# The Blender scripts need Blender; importing them raises an ImportError naming the replacement.
BLENDER_PREFIX = "shap_e.rendering.blender"

def read_listing() -> List[Tuple[str, str, str, str, List[str]]]:
    """(module, kind, name, parameter text, methods) per listed name."""
    rows = []
    for line in LISTING.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        module, declaration, *rest = line.split("\t")
        methods = []
        if rest and rest[0].startswith("methods:"):
            methods = [m.strip() for m in rest[0][len("methods:"):].split(",") if m.strip()]
        if declaration.startswith("!import-failed"):
            rows.append((module, "module", "", "", []))
            continue
        kind, rest_decl = declaration.split(" ", 1)
        name = rest_decl.split("(", 1)[0]
        rows.append((module, kind, name, _parameter_text(rest_decl[len(name):]), methods))
    return rows


def _parameter_text(signature: str) -> str:
    """The text between the outer parentheses of `(...) -> ...`."""
    depth = 0
    for i, char in enumerate(signature):
        depth += char in "([{"
        depth -= char in ")]}"
        if depth == 0:
            return signature[1:i]
    raise ValueError(f"unbalanced signature {signature!r}")


class OfficialParameter:
    def __init__(self, name: str, kind: inspect._ParameterKind, default: Optional[str]):
        self.name, self.kind, self.default = name, kind, default


def parse_parameters(text: str) -> List[OfficialParameter]:
    cleaned = re.sub(r"<class '([\w.]+)'>", r"\1", text).replace("<factory>", "FACTORY")
    tree = ast.parse(f"def f({cleaned}): pass").body[0].args
    params = []
    positional = tree.posonlyargs + tree.args
    defaults = [None] * (len(positional) - len(tree.defaults)) + list(tree.defaults)
    for arg, default in zip(tree.posonlyargs, defaults):
        params.append(OfficialParameter(arg.arg, inspect.Parameter.POSITIONAL_ONLY, _text(default)))
    for arg, default in zip(tree.args, defaults[len(tree.posonlyargs):]):
        params.append(OfficialParameter(arg.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, _text(default)))
    if tree.vararg:
        params.append(OfficialParameter(tree.vararg.arg, inspect.Parameter.VAR_POSITIONAL, None))
    for arg, default in zip(tree.kwonlyargs, tree.kw_defaults):
        params.append(OfficialParameter(arg.arg, inspect.Parameter.KEYWORD_ONLY, _text(default)))
    if tree.kwarg:
        params.append(OfficialParameter(tree.kwarg.arg, inspect.Parameter.VAR_KEYWORD, None))
    return params


def _text(node: Optional[ast.AST]) -> Optional[str]:
    return None if node is None else ast.unparse(node)


def same_default(official: str, ours: object) -> bool:
    if official == "FACTORY":
        return True  # a dataclass default_factory: the value is built per instance
    if official.startswith("device("):
        return True  # see the module docstring
    if official == "inf":
        return ours == float("inf")
    if official.startswith("torch."):
        return repr(ours) == official or str(ours) == official
    try:
        return ast.literal_eval(official) == ours
    except ValueError:
        return repr(ours) == official


def signature_problems(official: List[OfficialParameter], ours: inspect.Signature) -> List[str]:
    problems = []
    our_params = list(ours.parameters.values())
    by_name = {p.name: p for p in our_params}
    official_names = {p.name for p in official}
    has_var_kw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in our_params)
    for p in official:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            if not any(q.kind == p.kind for q in our_params):
                problems.append(f"missing *{p.name}" if p.kind == inspect.Parameter.VAR_POSITIONAL else f"missing **{p.name}")
            continue
        q = by_name.get(p.name)
        if q is None:
            if not has_var_kw or p.kind != inspect.Parameter.KEYWORD_ONLY:
                problems.append(f"missing parameter {p.name!r}")
            continue
        if q.kind != p.kind:
            problems.append(f"{p.name!r} is {q.kind.description}, official {p.kind.description}")
        if p.default is not None:
            if q.default is inspect.Parameter.empty:
                problems.append(f"{p.name!r} has no default, official {p.default}")
            elif not same_default(p.default, q.default):
                problems.append(f"{p.name!r} defaults to {q.default!r}, official {p.default}")
    official_positional = [p.name for p in official if p.kind in (
        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    our_positional = [q.name for q in our_params if q.kind in (
        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    if our_positional[: len(official_positional)] != official_positional:
        problems.append(f"positional order {our_positional}, official {official_positional}")
    for q in our_params:
        if q.name not in official_names and q.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            if q.default is inspect.Parameter.empty:
                problems.append(f"extra parameter {q.name!r} has no default")
    return problems


ROWS = read_listing()
IDS = [f"{module}:{name}" if name else module for module, _, name, _, _ in ROWS]


def find(module_name: str, name: str):
    module = importlib.import_module(module_name)
    return getattr(module, name) if name else module


def check_row(module: str, kind: str, name: str, params: str, methods: List[str]) -> List[str]:
    """The problems of one listed name (empty when it matches)."""
    if kind == "module":
        # Listed as failing to import in the official package (it needs PyTorch3D): the path must
        # exist, and may raise an ImportError that says what to use instead.
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name == module:
                return [f"does not exist ({e})"]
        return []
    try:
        obj = find(module, name)
    except (ImportError, AttributeError) as e:
        return [f"does not exist ({type(e).__name__}: {e})"]
    problems = [f"has no method {m!r}" for m in methods if not hasattr(obj, m)]
    if kind == "class" and params.replace(" ", "") in ("/,*args,**kwargs",):
        return problems
    target = obj
    if kind == "class":
        if not inspect.isclass(obj):
            return problems + [f"is not a class but {type(obj).__name__}"]
    elif not callable(obj):
        return problems + ["is not callable"]
    try:
        ours = inspect.signature(target)
    except (TypeError, ValueError) as e:
        return problems + [f"has no signature ({e})"]
    official = parse_parameters(params)
    if [p.kind for p in official] == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
        return problems
    return problems + signature_problems(official, ours)


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_official_name_exists_with_a_compatible_signature(row):
    module, kind, name, params, methods = row
    key = f"{module}:{name}" if name else module
    if module.startswith(BLENDER_PREFIX):
        with pytest.raises(ImportError, match="Blender"):
            importlib.import_module(module)
        return
    problems = check_row(module, kind, name, params, methods)
    assert not problems, f"{key}: " + "; ".join(problems)


BLENDER_MODULES = ["blender_script", "constants", "render", "view_data"]


@pytest.mark.parametrize("name", BLENDER_MODULES)
def test_blender_scripts_raise_an_import_error_naming_the_replacement(name):
    with pytest.raises(ImportError, match="Blender") as caught:
        importlib.import_module(f"{BLENDER_PREFIX}.{name}")
    assert "shap_e" in str(caught.value)
