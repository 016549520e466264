"""AttrDict behaves as the official one: attribute access, slash keys, conversion, map, combine."""
import pickle

import pytest
import torch

from shap_e.util.collections import AttrDict


def test_items_are_attributes_and_missing_ones_raise_attribute_error_not_none():
    d = AttrDict(a=1)
    d.b = 2
    assert d["b"] == 2 and d.a == 1
    with pytest.raises(AttributeError):
        d.missing
    del d.a
    assert "a" not in d


def test_slash_keys_create_and_read_nested_levels():
    d = AttrDict()
    d["render/options/mode"] = "stf"
    assert isinstance(d.render, AttrDict) and d.render.options.mode == "stf"
    assert d["render/options/mode"] == "stf"
    assert "render/options/mode" in d and "render/nothing" not in d and "nothing/x" not in d


def test_plain_dicts_become_attrdicts_also_inside_lists():
    d = AttrDict({"a": {"b": 1}, "items": [{"c": 2}, 3]})
    assert d.a.b == 1 and isinstance(d.a, AttrDict)
    assert d["items"][0].c == 2 and d["items"][1] == 3


def test_all_keys_lists_every_level_or_only_leaves():
    d = AttrDict({"a": {"b": 1, "c": {"d": 2}}, "e": 3})
    assert d.all_keys() == ["a", "a/b", "a/c", "a/c/d", "e"]
    assert d.all_keys(leaves_only=True) == ["a/b", "a/c/d", "e"]


def test_map_applies_to_leaves_with_their_keys():
    d = AttrDict({"x": torch.ones(2), "n": {"y": torch.zeros(2), "label": "keep"}})
    mapped = d.map(lambda k, v: v + 1, should_map=lambda k, v: isinstance(v, torch.Tensor))
    assert torch.equal(mapped.x, torch.full((2,), 2.0)) and torch.equal(mapped.n.y, torch.ones(2))
    assert mapped.n.label == "keep" and torch.equal(d.x, torch.ones(2))


def test_combine_pairs_leaves_over_the_union_of_keys_with_none_for_a_missing_side():
    a = AttrDict({"x": 1, "n": {"y": 2}})
    b = AttrDict({"x": 10, "n": {"y": 20}})
    assert a.combine(b, lambda u, v: u + v).dumpable() == {"x": 11, "n": {"y": 22}}
    pairs = AttrDict({"x": 1, "only_a": 2}).combine({"only_b": 3, "x": 4}, lambda u, v: (u, v))
    assert list(pairs) == ["x", "only_a", "only_b"]
    assert pairs.dumpable() == {"x": (1, 4), "only_a": (2, None), "only_b": (None, 3)}
    with pytest.raises(ValueError, match="nested"):
        a.combine(AttrDict(x=1, n=5), lambda u, v: u)


def test_dumpable_gives_plain_dicts_without_private_keys_or_with_their_repr():
    d = AttrDict({"a": {"b": [AttrDict(c=1)], "_inner": 1}, "_hidden": [2]})
    plain = d.dumpable()
    assert plain == {"a": {"b": [{"c": 1}]}} and type(plain["a"]) is dict
    assert d.dumpable(strip=False) == {"a": {"b": [{"c": 1}]}, "_hidden": "[2]"}


def test_equality_ignores_key_order_like_a_dict():
    assert AttrDict(a=1, b=2) == AttrDict(b=2, a=1) == {"a": 1, "b": 2}
    assert not AttrDict(a=1, b=2) != AttrDict(b=2, a=1)
    assert AttrDict(a=1) != AttrDict(a=2) and AttrDict(a=1) != [("a", 1)]


def test_pickles_round_trip():
    d = AttrDict({"a": {"b": 1}})
    again = pickle.loads(pickle.dumps(d))
    assert isinstance(again, AttrDict) and again.a.b == 1
