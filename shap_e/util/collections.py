"""`AttrDict`: the official package's nested, attribute-accessible dict (official path and behaviour).

Used only at the boundary of the official API (render options, batches and outputs, configs);
typed dataclasses carry data inside the package.

- `d.key` reads and writes `d["key"]`.
- A key with slashes addresses nested dicts: `d["a/b"] = 1` creates `d.a` (an AttrDict) and sets
  `d.a.b`; `"a/b" in d` and `d["a/b"]` read through the levels.
- Plain dicts stored in it (also inside lists) become AttrDicts.
- `map` and `combine` build new AttrDicts leaf by leaf; `combine` pairs the union of the keys,
  passing None for a side that lacks one; `dumpable` gives plain dicts without the `_private` keys.
- Equality ignores the order of the keys, like a dict's.

One deliberate difference: a missing key raises KeyError (`d["x"]`) or AttributeError (`d.x`)
where the official AttrDict returns None, so that a misspelt option fails where it is read.
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

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, dict):
            return NotImplemented
        return dict.__eq__(self, other)

    def __ne__(self, other: Any) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

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
        """Plain nested dicts and lists. Keys starting with `_` are dropped (`strip`) or keep only
        the `repr` of their value (`strip=False`); nested levels always drop them."""

        def dump(value: Any) -> Any:
            if isinstance(value, AttrDict):
                return value.dumpable()
            if isinstance(value, list):
                return [dump(v) for v in value]
            return value

        out = {}
        for key, value in self.items():
            private = isinstance(key, str) and key.startswith("_")
            if private and strip:
                continue
            out[key] = repr(value) if private else dump(value)
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

    def combine(
        self, other: Dict[str, Any], combine_fn: Callable[[Optional[Any], Optional[Any]], Any]
    ) -> "AttrDict":
        """A new AttrDict with `combine_fn(mine, theirs)` per leaf, over the keys of both (this
        one's first); a key only one side has gives None for the other. Where this side holds an
        AttrDict, the other must hold one too (or lack the key), and they are combined level by level.
        """

        def apply(key: Any, mine: Any, theirs: Any) -> Any:
            if isinstance(mine, AttrDict):
                if theirs is None:
                    theirs = AttrDict()
                if not isinstance(theirs, dict):
                    raise ValueError(f"combine: {key!r} is nested here but {type(theirs).__name__} in other")
                return mine.combine(theirs, combine_fn)
            return combine_fn(mine, theirs)

        keys = list(self.keys()) + [k for k in other.keys() if k not in self]
        return AttrDict({key: apply(key, dict.get(self, key), other.get(key)) for key in keys})


def _wrap(value: Any) -> Any:
    if isinstance(value, dict) and not isinstance(value, AttrDict):
        return AttrDict(value)
    if isinstance(value, list):
        return [AttrDict(v) if isinstance(v, dict) and not isinstance(v, AttrDict) else v for v in value]
    return value
