"""TorchMesh's geometry helpers: triangle areas and face colours."""
import torch
import trimesh

from shap_e.rendering.torch_mesh import TorchMesh, face_areas


def test_face_areas_of_right_triangles_and_a_degenerate_one():
    verts = torch.tensor([[0.0, 0, 0], [2, 0, 0], [0, 3, 0], [0, 0, 4], [1, 0, 0]])
    faces = torch.tensor([[0, 1, 2], [0, 3, 1], [0, 4, 1]])
    assert torch.allclose(face_areas(verts, faces), torch.tensor([3.0, 4.0, 0.0]))


def test_face_areas_of_a_box_sum_to_its_surface():
    box = trimesh.creation.box(extents=(1.0, 2.0, 3.0))
    mesh = TorchMesh(torch.tensor(box.vertices, dtype=torch.float32), torch.tensor(box.faces, dtype=torch.int64))
    areas = mesh.face_areas()
    assert areas.shape == (12,)
    assert float(areas.sum()) == 2 * (1 * 2 + 1 * 3 + 2 * 3)


def test_face_colors_stack_the_rgb_face_channels_or_are_none():
    verts, faces = torch.eye(3), torch.tensor([[0, 1, 2], [2, 1, 0]])
    channels = {"R": torch.tensor([0.1, 0.2]), "G": torch.tensor([0.3, 0.4]), "B": torch.tensor([0.5, 0.6])}
    colored = TorchMesh(verts, faces, face_channels=channels)
    assert torch.equal(colored.face_colors(), torch.tensor([[0.1, 0.3, 0.5], [0.2, 0.4, 0.6]]))
    assert TorchMesh(verts, faces).face_colors() is None
    assert TorchMesh(verts, faces, None, None).face_colors() is None
    assert TorchMesh(verts, faces, face_channels={"R": channels["R"]}).face_colors() is None
