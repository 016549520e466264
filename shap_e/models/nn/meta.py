"""Meta modules (official path): modules whose forward takes `params`, per-batch weights supplied at
call time (the NeRSTF MLP's first layers are generated from the latent, docs/behaviour.md#nerstf-mlp), with their own
parameters and buffers as defaults; and helpers for dotted-key parameter dicts.

A meta tensor is registered without a batch dimension (e.g. a weight `[d_out, d_in]`); the `params`
given at call time usually add one in front (`[batch, d_out, d_in]`), as `batch_meta_parameters`
does.
"""
import itertools
from typing import Dict, Iterator, Optional, Tuple

import torch
import torch.nn as nn

from shap_e.util.collections import AttrDict

__all__ = [
    "MetaModule",
    "batch_meta_parameters",
    "batch_meta_state_dict",
    "leveldict",
    "leveliter",
    "subdict",
    "superdict",
]


def subdict(dictionary: Optional[Dict], key: Optional[str] = None) -> Optional[AttrDict]:
    """The entries under `key.` with that prefix removed (`{"a.b": 1, "c": 2}`, "a" -> `{"b": 1}`).

    An empty or None key returns the dictionary itself; a None dictionary returns None.
    """
    if dictionary is None:
        return None
    if not key:
        return dictionary
    prefix = key + "."
    return AttrDict([(k[len(prefix):], v) for k, v in dictionary.items()
                     if k.startswith(prefix) and len(k) > len(prefix)])


def superdict(dictionary: Optional[Dict], key: Optional[str] = None) -> Optional[AttrDict]:
    """Every key prefixed with `key.` (the inverse of `subdict`); an empty or None key changes nothing."""
    if dictionary is None:
        return None
    if not key:
        return dictionary
    return AttrDict([(f"{key}.{k}", v) for k, v in dictionary.items()])


def leveliter(dictionary: Dict, depth: int = 0) -> Iterator[Tuple[str, object]]:
    """The items whose key has exactly `depth` dots (depth 0: the root level)."""
    for key, value in dictionary.items():
        if key.count(".") == depth:
            yield key, value


def leveldict(dictionary: Dict, depth: int = 0) -> AttrDict:
    """`leveliter` as an AttrDict."""
    return AttrDict(list(leveliter(dictionary, depth=depth)))


class MetaModule(nn.Module):
    """An `nn.Module` some of whose tensors are meta tensors: replaceable per call through `params`.

    A meta parameter is trainable; a meta buffer is not (it is a default, usually overridden).
    `update(params)` fills the missing entries of `params` from the module's own tensors.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._meta_state_dict = set()
        self._meta_params = set()

    def register_meta_buffer(self, name: str, param: torch.Tensor) -> None:
        """Register `param` as a buffer that `meta_state_dict` lists."""
        self.register_buffer(name, param)
        self._meta_state_dict.add(name)

    def register_meta_parameter(self, name: str, parameter: nn.Parameter) -> None:
        """Register a parameter that `named_meta_parameters` and `meta_state_dict` list."""
        self.register_parameter(name, parameter)
        self._meta_params.add(name)
        self._meta_state_dict.add(name)

    def register_meta(self, name: str, parameter: nn.Parameter, trainable: bool = True) -> None:
        """A meta parameter if `trainable`, else a meta buffer."""
        self.register(name, parameter, meta=True, trainable=trainable)

    def register(self, name: str, parameter: nn.Parameter, meta: bool, trainable: bool = True) -> None:
        """Register `parameter` as a (meta) parameter when `trainable`, else as a (meta) buffer."""
        if meta:
            (self.register_meta_parameter if trainable else self.register_meta_buffer)(name, parameter)
        else:
            (self.register_parameter if trainable else self.register_buffer)(name, parameter)

    def named_meta_parameters(self, prefix: str = "", recurse: bool = True):
        """(name, parameter) of the meta parameters of this module (and its submodules)."""
        return self._named_members(
            lambda m: ((n, p) for n, p in m._parameters.items() if n in _meta_names(m, "_meta_params")),
            prefix=prefix, recurse=recurse,
        )

    def named_nonmeta_parameters(self, prefix: str = "", recurse: bool = True):
        """(name, parameter) of the ordinary parameters (of plain submodules too)."""
        return self._named_members(
            lambda m: ((n, p) for n, p in m._parameters.items() if n not in _meta_names(m, "_meta_params")),
            prefix=prefix, recurse=recurse,
        )

    def nonmeta_parameters(self, prefix: str = "", recurse: bool = True):
        """The ordinary parameters."""
        for _, param in self.named_nonmeta_parameters(prefix=prefix, recurse=recurse):
            yield param

    def meta_state_dict(self, prefix: str = "", recurse: bool = True) -> Dict[str, torch.Tensor]:
        """`{name: tensor}` of every meta parameter and meta buffer (not detached, unlike `state_dict`)."""

        def members(m):
            tensors = itertools.chain(m._buffers.items(), m._parameters.items())
            return ((n, t) for n, t in tensors if n in _meta_names(m, "_meta_state_dict"))

        return dict(self._named_members(members, prefix=prefix, recurse=recurse))

    def update(self, params: Optional[Dict[str, torch.Tensor]] = None) -> AttrDict:
        """`params` (dotted names, relative to this module) completed with this module's parameters
        and (detached) buffers for every name it does not give."""
        params = AttrDict() if params is None else AttrDict(params)
        for name, param in self.named_parameters():
            params.setdefault(name, param)
        for name, buffer in self.named_buffers():
            params.setdefault(name, buffer.detach())
        return params

    def meta_tensor(self, params: Optional[Dict[str, torch.Tensor]], name: str) -> Optional[torch.Tensor]:
        """`update(params)[name]` for one of this module's own tensors, without building the dict."""
        if params is not None and name in params:
            return params[name]
        if name in self._buffers:
            buffer = self._buffers[name]
            return None if buffer is None else buffer.detach()
        return self._parameters.get(name)


def _meta_names(module: nn.Module, attribute: str) -> set:
    return getattr(module, attribute, set()) if isinstance(module, MetaModule) else set()


def batch_meta_parameters(net: MetaModule, batch_size: int) -> AttrDict:
    """Each meta parameter of `net` repeated into `[batch_size, *shape]` (a copy)."""
    return AttrDict([(name, _tile(p, batch_size)) for name, p in net.named_meta_parameters()])


def batch_meta_state_dict(net: MetaModule, batch_size: int) -> AttrDict:
    """Each meta parameter and meta buffer of `net` repeated into `[batch_size, *shape]` (a copy)."""
    return AttrDict([(name, _tile(t, batch_size)) for name, t in net.meta_state_dict().items()])


def _tile(tensor: torch.Tensor, batch_size: int) -> torch.Tensor:
    return tensor.clone().unsqueeze(0).repeat(batch_size, *[1] * tensor.ndim)
