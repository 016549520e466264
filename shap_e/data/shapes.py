"""Procedural shape builders: one function per category, +Z up, built from trimesh primitives.

Each builder draws its own small variations (leg thickness, cap size, ...) from the generator it is
given and returns a list of :class:`Part`. ``role`` says which colour a part gets: ``"primary"``
(the object's colour) or ``"secondary"`` (legs, stem, lamp base, snowman hat). Sizes are canonical
(roughly unit); proportions and normalisation are applied by :mod:`shap_e.data.procedural`.
"""
from dataclasses import dataclass
from typing import Callable, Dict, List

import numpy as np
import trimesh

__all__ = ["BUILDERS", "CATEGORIES", "MULTI_PART", "Part", "build_parts"]

_SECTIONS = 32  # segments around round primitives: smooth at 256² renders, ~100-1000 faces per part


@dataclass
class Part:
    """One closed primitive: ``vertices [V, 3]`` float64, ``faces [F, 3]`` int64, outward winding."""

    vertices: np.ndarray
    faces: np.ndarray
    role: str


def _part(
    mesh: trimesh.Trimesh, role: str = "primary", offset=(0.0, 0.0, 0.0), scale=(1.0, 1.0, 1.0)
) -> Part:
    vertices = np.asarray(mesh.vertices, dtype=np.float64) * np.asarray(scale) + np.asarray(offset)
    return Part(vertices, np.asarray(mesh.faces, dtype=np.int64), role)


def _box(extents, role: str = "primary", offset=(0.0, 0.0, 0.0)) -> Part:
    return _part(trimesh.creation.box(extents=extents), role, offset)


def _round_rod(radius: float, height: float, role: str = "primary", offset=(0.0, 0.0, 0.0)) -> Part:
    """Z-aligned closed cylinder centred at ``offset``."""
    return _part(trimesh.creation.cylinder(radius=radius, height=height, sections=_SECTIONS), role, offset)


def _ellipsoid(radii, role: str = "primary", offset=(0.0, 0.0, 0.0)) -> Part:
    return _part(trimesh.creation.icosphere(subdivisions=3, radius=1.0), role, offset, radii)


def _four_legs(half_x: float, half_y: float, height: float, thickness: float) -> List[Part]:
    """Four square legs standing on z=0 with their centres at (±half_x, ±half_y)."""
    return [
        _box((thickness, thickness, height), "secondary", (sx * half_x, sy * half_y, height / 2))
        for sx in (-1, 1)
        for sy in (-1, 1)
    ]


def _cube(rng: np.random.Generator) -> List[Part]:
    return [_box((1.0, 1.0, 1.0))]


def _sphere(rng: np.random.Generator) -> List[Part]:
    return [_ellipsoid((0.5, 0.5, 0.5))]


def _cylinder(rng: np.random.Generator) -> List[Part]:
    return [_round_rod(0.5, rng.uniform(0.9, 1.2))]


def _cone(rng: np.random.Generator) -> List[Part]:
    mesh = trimesh.creation.cone(radius=0.5, height=rng.uniform(0.9, 1.3), sections=_SECTIONS)
    return [_part(mesh)]


def _torus(rng: np.random.Generator) -> List[Part]:
    minor = rng.uniform(0.1, 0.2)
    mesh = trimesh.creation.torus(major_radius=0.5 - minor, minor_radius=minor,
                                  major_sections=_SECTIONS, minor_sections=16)
    return [_part(mesh)]


def _pyramid(rng: np.random.Generator) -> List[Part]:
    """Square-based pyramid, base on z=0, apex above the centre."""
    height = rng.uniform(0.7, 1.0)
    vertices = np.array(
        [[-0.5, -0.5, 0.0], [0.5, -0.5, 0.0], [0.5, 0.5, 0.0], [-0.5, 0.5, 0.0], [0.0, 0.0, height]]
    )
    # Counter-clockwise seen from outside, so normals point outward (positive volume).
    faces = np.array([[0, 2, 1], [0, 3, 2], [0, 1, 4], [1, 2, 4], [2, 3, 4], [3, 0, 4]], dtype=np.int64)
    return [Part(vertices, faces, "primary")]


def _capsule(rng: np.random.Generator) -> List[Part]:
    mesh = trimesh.creation.capsule(height=rng.uniform(0.6, 1.2), radius=0.4, count=[16, 16])
    return [_part(mesh)]


def _table(rng: np.random.Generator) -> List[Part]:
    """A rectangular top on four legs; the legs are the secondary part."""
    leg_height, top = rng.uniform(0.55, 0.75), rng.uniform(0.05, 0.09)
    length, depth, leg = 1.0, rng.uniform(0.55, 0.8), rng.uniform(0.05, 0.09)
    legs = _four_legs(length / 2 - leg, depth / 2 - leg, leg_height, leg)
    return [_box((length, depth, top), "primary", (0.0, 0.0, leg_height + top / 2))] + legs


def _chair(rng: np.random.Generator) -> List[Part]:
    """Seat and backrest (primary) on four legs (secondary); the backrest is along -Y."""
    leg_height, seat, leg = rng.uniform(0.4, 0.5), 0.06, rng.uniform(0.04, 0.06)
    width, back_height = rng.uniform(0.45, 0.55), rng.uniform(0.4, 0.6)
    legs = _four_legs(width / 2 - leg, width / 2 - leg, leg_height, leg)
    seat_part = _box((width, width, seat), "primary", (0.0, 0.0, leg_height + seat / 2))
    back_offset = (0.0, -(width - seat) / 2, leg_height + seat + back_height / 2)
    return [seat_part, _box((width, seat, back_height), "primary", back_offset)] + legs


def _mushroom(rng: np.random.Generator) -> List[Part]:
    """A domed cap (primary) on a stem (secondary)."""
    stem_height, stem_radius = rng.uniform(0.4, 0.6), rng.uniform(0.08, 0.14)
    cap_radius = rng.uniform(0.35, 0.5)
    stem = _round_rod(stem_radius, stem_height, "secondary", (0.0, 0.0, stem_height / 2))
    # Lift the dome by half its height so the lens-shaped underside shows most of the stem.
    cap_height = cap_radius * 0.55
    cap_centre = (0.0, 0.0, stem_height + cap_height / 2)
    cap = _ellipsoid((cap_radius, cap_radius, cap_height), "primary", cap_centre)
    return [stem, cap]


def _lamp(rng: np.random.Generator) -> List[Part]:
    """A truncated-cone shade (primary) on a pole and a round base (secondary)."""
    pole_height, base_radius = rng.uniform(0.5, 0.8), rng.uniform(0.15, 0.25)
    shade_height, shade_radius = rng.uniform(0.3, 0.4), rng.uniform(0.25, 0.35)
    base = _round_rod(base_radius, 0.05, "secondary", (0.0, 0.0, 0.025))
    pole = _round_rod(0.025, pole_height, "secondary", (0.0, 0.0, pole_height / 2))
    shade = trimesh.creation.cylinder(radius=shade_radius, height=shade_height, sections=_SECTIONS)
    vertices = np.array(shade.vertices)
    vertices[vertices[:, 2] > 0, :2] *= 0.6  # narrow the top ring: a frustum, still closed
    vertices[:, 2] += pole_height
    return [base, pole, Part(vertices, np.asarray(shade.faces, dtype=np.int64), "primary")]


def _snowman(rng: np.random.Generator) -> List[Part]:
    """Three stacked balls (primary) wearing a top hat (secondary)."""
    radii = np.array([0.3, 0.22, 0.15]) * rng.uniform(0.9, 1.1, size=3)
    parts, z = [], 0.0
    for radius in radii:
        z += radius
        parts.append(_ellipsoid((radius, radius, radius), "primary", (0.0, 0.0, z)))
        z += radius * 0.75  # balls overlap, as a snowman's do
    head_top = z + radii[-1] * 0.25
    brim, crown = radii[-1] * 1.3, rng.uniform(0.12, 0.18)
    parts.append(_round_rod(brim, 0.02, "secondary", (0.0, 0.0, head_top - 0.03)))
    parts.append(_round_rod(brim * 0.65, crown, "secondary", (0.0, 0.0, head_top - 0.03 + crown / 2)))
    return parts


BUILDERS: Dict[str, Callable[[np.random.Generator], List[Part]]] = {
    "cube": _cube,
    "sphere": _sphere,
    "cylinder": _cylinder,
    "cone": _cone,
    "torus": _torus,
    "pyramid": _pyramid,
    "capsule": _capsule,
    "table": _table,
    "chair": _chair,
    "mushroom": _mushroom,
    "lamp": _lamp,
    "snowman": _snowman,
}
CATEGORIES = tuple(BUILDERS)
MULTI_PART = ("table", "chair", "mushroom", "lamp", "snowman")


def build_parts(category: str, rng: np.random.Generator) -> List[Part]:
    """Build the parts of one ``category`` object with variations drawn from ``rng``."""
    if category not in BUILDERS:
        raise ValueError(f"unknown category {category!r}; valid: {list(CATEGORIES)}")
    return BUILDERS[category](rng)
