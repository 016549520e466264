"""The peer benchmark compares like with like: diffusers' modules given this package's weights compute
the same functions (golden small prior; a sphere SDF through both marching cubes)."""
import pytest
import torch

pytest.importorskip("diffusers")

from bench.peer_diffusers import build_prior, max_rel_diff, prior_config, their_forward  # noqa: E402


def test_prior_config_of_the_golden_model_names_its_shapes(golden_text_prior):
    model, _ = golden_text_prior
    config = prior_config(model)
    assert (config["num_attention_heads"], config["attention_head_dim"], config["num_layers"]) == (4, 16, 2)
    assert (config["num_embeddings"], config["embedding_dim"], config["clip_embed_dim"]) == (8, 16, 32)


def test_diffusers_prior_with_mapped_weights_gives_this_packages_forward(golden_text_prior):
    model, a = golden_text_prior
    theirs = build_prior(model)
    x = a["inputs"]["x"]
    for case in a["inputs"]["cases"][:4]:
        embeddings = case["embeddings"]
        with torch.no_grad():
            ours = model(x, case["t"], embeddings=embeddings)
            out = their_forward(theirs, x, case["t"], embeddings)
        assert max_rel_diff(out, ours) < 1e-5, case["name"]
    with torch.no_grad():  # a wrong head regrouping would not survive a changed query
        broken = build_prior(model)
        broken.transformer_blocks[0].attn1.to_q.weight.mul_(1.5)
        assert max_rel_diff(their_forward(broken, x, a["inputs"]["cases"][0]["t"], a["inputs"]["cases"][0]["embeddings"]),
                            model(x, a["inputs"]["cases"][0]["t"], embeddings=a["inputs"]["cases"][0]["embeddings"])) > 1e-3


def test_filled_tables_make_diffusers_marching_cubes_give_this_packages_faces():
    from diffusers.pipelines.shap_e.renderer import MeshDecoder

    from shap_e.rendering.marching_cubes import marching_cubes
    from shap_e.rendering.mc_table import triangle_table

    axis = torch.linspace(-1, 1, 20)
    grid = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), dim=-1)
    field = 0.6 - grid.norm(dim=-1)  # a sphere, positive inside
    decoder = MeshDecoder()
    assert decoder(field, torch.full((3,), -1.0), torch.full((3,), 2.0)).faces.shape[0] == 0  # empty tables
    decoder.cases.copy_(triangle_table()[0])
    decoder.masks.copy_(triangle_table()[1])
    theirs = decoder(field, torch.full((3,), -1.0), torch.full((3,), 2.0))
    ours = marching_cubes(field, (-1.0, -1.0, -1.0), (2.0, 2.0, 2.0))
    assert theirs.faces.shape[0] == ours.faces.shape[0] > 500
    a, b = (torch.sort(v.verts.flatten())[0] for v in (theirs, ours))
    assert torch.allclose(a, b, atol=1e-5)
