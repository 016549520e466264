"""`AttrDict`: the official package's nested, attribute-accessible dict (official path and behaviour).

Used only at the boundary of the official API (render options, batches and outputs, configs);
typed dataclasses carry data inside the package.

- `d.key` reads and writes `d["key"]`; a missing attribute raises AttributeError.
- A key with slashes addresses nested dicts: `d["a/b"] = 1` creates `d.a` (an AttrDict) and sets
  `d.a.b`; `"a/b" in d` and `d["a/b"]` read through the levels.
- Plain dicts stored in it (also inside lists) become AttrDicts.
"""
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional

__all__ = ["AttrDict"]


def _split(key: Any):
    if isinstance(key, str) and "/" in key:
        head, rest = key.split("/", 1)
        return head, rest
    return key, None


class AttrDict(OrderedDict):
    """An ordered dict whose items are also attributes, with `"a/b"` keys for nested levels."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()
        if len(args) > 1:
            raise TypeError(f"AttrDict takes at most one positional mapping, got {len(args)}")
        items = dict(args[0]) if args else {}
        items.update(kwargs)
        for key, value in items.items():
            self[key] = value

    def __setitem__(self, key: Any, value: Any) -> None:
        head, rest = _split(key)
        if rest is not None:
            if head not in self:
                super().__setitem__(head, AttrDict())
            self[head][rest] = value
            return
        super().__setitem__(key, _wrap(value))

    def __getitem__(self, key: Any) -> Any:
        head, rest = _split(key)
        if rest is not None:
            return self[head][rest]
        return super().__getitem__(key)

    def __contains__(self, key: Any) -> bool:
        head, rest = _split(key)
        if rest is not None:
            return super().__contains__(head) and isinstance(self[head], dict) and rest in self[head]
        return super().__contains__(key)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name not in self:
            raise AttributeError(name)
        return self[name]

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError as e:
            raise AttributeError(name) from e

    def __reduce__(self):
        return (AttrDict, (dict(self),))

    def all_keys(self, leaves_only: bool = False, parent: Optional[str] = None) -> List[str]:
        """Every key at every level as a slash path (`["a", "a/b"]`); only leaves with `leaves_only`."""
        keys = []
        for key, value in self.items():
            path = key if parent is None else f"{parent}/{key}"
            nested = isinstance(value, AttrDict)
            if not (leaves_only and nested):
                keys.append(path)
            if nested:
                keys.extend(value.all_keys(leaves_only=leaves_only, parent=path))
        return keys

    def dumpable(self, strip: bool = True) -> Dict[Any, Any]:
        """Plain nested dicts and lists. Keys starting with `__` are dropped (`strip`) or lose one
        leading underscore (`strip=False`)."""

        def dump(value: Any) -> Any:
            if isinstance(value, AttrDict):
                return value.dumpable(strip)
            if isinstance(value, list):
                return [dump(v) for v in value]
            return value

        out = {}
        for key, value in self.items():
            private = isinstance(key, str) and key.startswith("__")
            if private and strip:
                continue
            out[key[1:] if private else key] = dump(value)
        return out

    def map(self, map_fn: Callable[[Any, Any], Any], should_map: Optional[Callable[[Any, Any], bool]] = None) -> "AttrDict":
        """A new AttrDict with `map_fn(key, value)` applied to every leaf (those `should_map` accepts)."""

        def apply(key: Any, value: Any) -> Any:
            if isinstance(value, AttrDict):
                return value.map(map_fn, should_map)
            if should_map is None or should_map(key, value):
                return map_fn(key, value)
            return value

        return AttrDict({key: apply(key, value) for key, value in self.items()})

    def combine(self, other: "AttrDict", combine_fn: Callable[[Any, Any], Any]) -> "AttrDict":
        """A new AttrDict with `combine_fn(mine, theirs)` per leaf; both must have the same keys."""
        if list(self.keys()) != list(other.keys()):
            raise ValueError(f"combine needs the same keys: {list(self.keys())} vs {list(other.keys())}")

        def apply(mine: Any, theirs: Any) -> Any:
            if isinstance(mine, AttrDict):
                if not isinstance(theirs, AttrDict):
                    raise ValueError("combine needs the same nesting in both AttrDicts")
                return mine.combine(theirs, combine_fn)
            return combine_fn(mine, theirs)

        return AttrDict({key: apply(self[key], other[key]) for key in self.keys()})


def _wrap(value: Any) -> Any:
    if isinstance(value, dict) and not isinstance(value, AttrDict):
        return AttrDict(value)
    if isinstance(value, list):
        return [AttrDict(v) if isinstance(v, dict) and not isinstance(v, AttrDict) else v for v in value]
    return value
