"""EvalSettings: checked when made, task defaults filled in, and recorded per task."""
import pytest

from shap_e.eval.settings import DEFAULT_GUIDANCE, TASK_SETTINGS, EvalSettings, Judges


@pytest.mark.parametrize("kwargs, message", [
    (dict(steps=1), "steps must be at least 2"),
    (dict(batch_size=0), "batch_size must be at least 1"),
    (dict(grid_size=4), "grid_size must be at least 8"),
    (dict(resolution=4), "resolution must be at least 8"),
    (dict(n_samples=0), "n_samples must be at least 1"),
    (dict(refine_steps=-1), "refine_steps must be at least 0"),
    (dict(guidance_max_sigma=0.0), "guidance_max_sigma must be a positive number"),
    (dict(init_strength=0.0), r"init_strength must be in \(0, 1\]"),
    (dict(sampler="magic"), "sampler='magic' is unknown"),
    (dict(vertex_placement="middle"), "vertex_placement='middle' is unknown"),
])
def test_bad_settings_are_refused_when_made(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EvalSettings(**kwargs)


def test_guidance_defaults_to_the_tasks_official_value_unless_given():
    assert EvalSettings().for_task("text_to_3d").guidance_scale == DEFAULT_GUIDANCE["text_to_3d"] == 15.0
    assert EvalSettings().for_task("image_to_3d").guidance_scale == 3.0
    assert EvalSettings(guidance_scale=2.0).for_task("image_to_3d").guidance_scale == 2.0
    assert EvalSettings().for_task("reconstruction").guidance_scale is None


def test_each_task_records_the_settings_it_uses_in_order():
    settings = EvalSettings(guidance_max_sigma=5.0, steps=32, refine_steps=3, seed=1000)
    assert settings.record("reconstruction") == dict(grid_size=64, resolution=64, n_samples=10000, seed=1000,
                                                     refine_steps=3, vertex_placement="reference")
    text = settings.record("text_to_3d")
    assert list(text) == list(TASK_SETTINGS["text_to_3d"]) and text["guidance_scale"] == 15.0
    assert text["guidance_max_sigma"] == 5.0 and text["steps"] == 32 and "refine_steps" not in text
    assert settings.record("image_to_3d")["init_strength"] == 1.0
    assert settings.record("ground_truth") == {}


def test_judges_build_the_default_classifier_only_when_none_is_given(monkeypatch):
    from shap_e.eval import settings as settings_module

    built = []
    monkeypatch.setattr(settings_module, "build_classifier", lambda: built.append(1) or "default")
    assert Judges().built().main == "default" and built == [1]
    given = Judges("mine", {"other": "x"})
    assert given.built() is given and built == [1]
    assert Judges(extra={"decoded": "d"}).built().extra == {"decoded": "d"}
