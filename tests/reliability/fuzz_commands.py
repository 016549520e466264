"""Hypothesis strategies for `shap-e` command lines: every subcommand, every option, values a user
may type (good ones kept small so that a run takes a second, and mistakes: NaN, infinities, huge,
negative and malformed numbers, empty, Unicode and very long strings, missing, unwritable and
file-instead-of-folder paths).

`Inputs` names the files a command line may refer to; `COMMANDS[name](inputs)` draws the argv lists
of one subcommand, `QUOTAS[name]` of them per run.
"""
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence

from hypothesis import strategies as st

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
BAD_INTS = ["-1", "0", "-7", "10000000", "99999999999999999999", "9223372036854775807", "nan", "inf", "1.5", "abc",
            "", " 3", "1e3"]
BAD_FLOATS = ["nan", "inf", "-inf", "1e30", "-1e30", "-5", "0", "", "abc", "1e-320", "NaN"]
BAD_STRINGS = ["", " ", "\t\n", "x" * 300, "é" * 200, "🟥" * 50, "../..", "-", "--", "a\nb"]
# One command line in eight is written with care (every value good, so it runs: about a second
# each), the others may hold mistakes (refused in milliseconds; when none was drawn they run too):
# drawn per command line through this shared flag.
MISTAKES = st.shared(st.sampled_from([True] * 7 + [False]), key="mistakes")
PROMPTS = ["a red cube", "a blue ball", "un cubo rojo", "一个红色的立方体", "🟥🧊", "A Red Cube!", "a green torus"]


@dataclass
class Inputs:
    """Absolute paths of prepared input files (see tests/reliability/test_fuzz.py)."""

    prompts: Dict[str, str]  # name -> prompts file (good, empty, binary, unicode, duplicates)
    latents: Dict[str, str]  # good, nan, inf, half, int, empty, random, batch, evil, wrong_size
    assets: Dict[str, str]  # box, garbage, empty
    images: Dict[str, str]  # red, garbage, tiny
    configs: Dict[str, str]  # training configs: bad_yaml, not_mapping, unknown_keys, missing_data
    dataset: str  # a folder written by `shap-e dataset`
    cache: str


def option(name: str, good: st.SearchStrategy, bad: Sequence[str] = (), omit: int = 6, good_weight: int = 3,
           bad_weight: int = 1) -> st.SearchStrategy:
    """`[]`, `[name, good value]` or, in a command line with mistakes, `[name, mistaken value]`."""
    clean = st.one_of([st.just([])] * omit + [good.map(lambda v: [name, str(v)])] * good_weight)
    if not bad:
        return clean
    mistaken = st.one_of([clean] * (omit + good_weight) + [st.sampled_from(list(bad)).map(lambda v: [name, v])]
                         * bad_weight)
    return MISTAKES.flatmap(lambda wrong: mistaken if wrong else clean)


def either(good: st.SearchStrategy, bad: st.SearchStrategy) -> st.SearchStrategy:
    """`good`, or in a command line with mistakes one time in three `bad`."""
    return MISTAKES.flatmap(lambda wrong: st.one_of(good, good, bad) if wrong else good)


def flag(name: str, weight: int = 1, of: int = 4) -> st.SearchStrategy:
    return st.sampled_from([[name]] * weight + [[]] * (of - weight))


def output_paths(kind: str) -> st.SearchStrategy:
    """Where outputs go, relative to the run's own folder (which holds `exists_file`, `exists_dir/`
    and `blocker`, a file), or places that cannot be written."""
    suffix = {"file": ".pt", "gif": ".gif", "json": ".json", "safetensors": ".safetensors"}.get(kind, "")
    good = [f"out{suffix}", f"new/deeper/out{suffix}", f"ünïcödé{suffix or '_dir'}"]
    bad = [f"blocker/out{suffix}", f"/proc/shap_e_fuzz/out{suffix}", "exists_file", "exists_dir", "x" * 300 + suffix,
           ""]
    return either(st.sampled_from(good), st.sampled_from(bad))


def _join(*parts: List[str]) -> List[str]:
    return [item for part in parts for item in part]


def sampling_options(inputs: Inputs, kind: str) -> st.SearchStrategy:
    steps = option("--steps", st.integers(2, 3), BAD_INTS, omit=0, good_weight=8)
    grid = option("--grid-size", st.integers(8, 16), BAD_INTS + ["100000", "4096"], omit=0, good_weight=8)
    parts = [
        option("-o", output_paths("dir"), omit=1, good_weight=5),
        flag("--overwrite"),
        option("--model", st.sampled_from([f"{kind}-small"]),
               ["image-small" if kind == "text" else "text-small", "transmitter-small", "nope", "text300M",
                "diffusion", ""]),
        option("--batch", st.integers(1, 2), BAD_INTS, omit=8),
        option("--seed", st.integers(0, 5), BAD_INTS + ["9223372036854775807"]),
        option("--preset", st.sampled_from(["default", "fast"]), ["turbo", ""], omit=8),
        steps,
        option("--guidance", st.sampled_from(["0", "1", "3", "-2", "15", "999"]), BAD_FLOATS),
        option("--guidance-max-sigma", st.sampled_from(["all", "5", "0.5", "1e9"]), BAD_FLOATS),
        option("--sampler", st.sampled_from(["heun", "euler", "euler_ancestral", "dpmpp_2m"]), ["rk4"]),
        option("--device", st.sampled_from(["auto", "cpu"]), ["cuda", "mps", "tpu"], omit=8),
        option("--dtype", st.sampled_from(["float32", "bfloat16"]), ["float16", "int8"], omit=10),
        option("--format", st.sampled_from(["ply", "glb", "obj", "glb,ply,obj", " PLY , glb "]),
               ["fbx", "", ",", "ply,fbx"], omit=0, good_weight=6),
        flag("--texture", 1, 10),
        option("--texture-size", st.sampled_from(["16", "64"]), BAD_INTS + ["9000"], omit=0, good_weight=8),
        option("--max-faces", st.sampled_from(["4", "100", "20000"]), BAD_INTS),
        grid,
        option("--vertex-placement", st.sampled_from(["reference", "sampled"]), ["middle"]),
        flag("--gif", 1, 6),
        flag("--mp4", 1, 20),
        option("--render-mode", st.sampled_from(["stf"]), ["nerf", "mesh"]),
        option("--render-size", st.integers(8, 16), BAD_INTS, omit=0, good_weight=8),
        option("--cache-dir", st.sampled_from([inputs.cache, "newcache"]), ["blocker", "/proc/shap_e_fuzz"],
               omit=8),
    ]
    return st.tuples(*parts).map(lambda drawn: _join(*drawn))


def text_command(inputs: Inputs) -> st.SearchStrategy:
    prompt = st.one_of(st.sampled_from(PROMPTS), TEXT.filter(str.strip), st.just(" ".join(["word"] * 2000)))
    good = st.one_of(prompt.map(lambda p: [p]), st.sampled_from([inputs.prompts[n] for n in ("good", "issue")]).map(
        lambda p: ["--prompts", p]))
    bad = st.one_of(st.sampled_from(BAD_STRINGS).map(lambda p: [p]),
                    st.sampled_from(sorted(inputs.prompts.values()) + ["missing.txt", "exists_dir"]).map(
                        lambda p: ["--prompts", p]),
                    st.tuples(prompt, st.sampled_from(sorted(inputs.prompts.values()))).map(
                        lambda t: [t[0], "--prompts", t[1]]),
                    st.just([]))
    source = either(good, bad)
    return st.tuples(source, sampling_options(inputs, "text")).map(lambda t: ["text", *t[0], *t[1]])


def image_command(inputs: Inputs) -> st.SearchStrategy:
    image = either(st.just(inputs.images["red"]),
                   st.sampled_from(sorted(inputs.images.values()) + ["missing.png", "exists_dir", ""]))
    strength = option("--init-strength", st.sampled_from(["0.2", "1", "0.5"]), BAD_FLOATS + ["1.5"])
    return st.tuples(image, sampling_options(inputs, "image"), strength).map(
        lambda t: ["image", t[0], *t[1], *t[2]])


def model_options(inputs: Inputs, names: Sequence[str]) -> List[st.SearchStrategy]:
    return [
        option("--model", st.sampled_from(list(names)),
               ["text-small", "image-small", "nope", "transmitter", "decoder", "diffusion", ""], omit=5),
        option("--device", st.sampled_from(["auto", "cpu"]), ["cuda", "mps", "tpu"], omit=8),
        option("--cache-dir", st.sampled_from([inputs.cache]), ["blocker", "/proc/shap_e_fuzz", ""], omit=8),
        flag("--overwrite"),
    ]


def encode_command(inputs: Inputs) -> st.SearchStrategy:
    asset = either(st.just(inputs.assets["box"]), st.sampled_from(
        sorted(inputs.assets.values()) + [inputs.latents["good"], "missing.ply", "exists_dir"]))
    parts = [option("-o", output_paths("file"), omit=0),
             option("--seed", st.integers(0, 3), BAD_INTS),
             option("--refine-steps", st.integers(0, 3), BAD_INTS),
             *model_options(inputs, ["transmitter-small"])]
    return st.tuples(asset, *parts).map(lambda t: ["encode", t[0], *_join(*t[1:])])


def latent_argument(inputs: Inputs) -> st.SearchStrategy:
    return either(st.sampled_from([inputs.latents["good"], inputs.latents["half"]]),
                  st.sampled_from(sorted(inputs.latents.values()) + ["missing.pt", "exists_dir", ""]))


def decode_command(inputs: Inputs) -> st.SearchStrategy:
    parts = [option("-o", output_paths("dir"), omit=0),
             option("--format", st.sampled_from(["ply", "glb", "obj,glb"]), ["fbx", ""], omit=2),
             option("--grid-size", st.integers(8, 16), BAD_INTS + ["4096"], omit=0, good_weight=8),
             flag("--texture", 1, 10),
             option("--texture-size", st.sampled_from(["16", "64"]), BAD_INTS, omit=0, good_weight=8),
             option("--max-faces", st.sampled_from(["4", "100", "20000"]), BAD_INTS),
             option("--vertex-placement", st.sampled_from(["reference", "sampled"]), ["x"]),
             *model_options(inputs, ["transmitter-small"])]
    return st.tuples(latent_argument(inputs), *parts).map(lambda t: ["decode", t[0], *_join(*t[1:])])


def render_command(inputs: Inputs) -> st.SearchStrategy:
    parts = [option("-o", either(st.sampled_from(["t.gif", "new/t.gif", "t.mp4"]), st.sampled_from(
                 ["blocker/t.gif", "/proc/shap_e_fuzz/t.gif", "t.png", "exists_file", "exists_dir", ""])), omit=0),
             option("--size", st.integers(8, 16), BAD_INTS + ["4096"], omit=0, good_weight=8),
             option("--views", st.integers(1, 3), BAD_INTS, omit=0, good_weight=8),
             option("--render-mode", st.sampled_from(["stf"]), ["nerf", "x"]),
             *model_options(inputs, ["transmitter-small"])]
    return st.tuples(latent_argument(inputs), *parts).map(lambda t: ["render", t[0], *_join(*t[1:])])


def models_command(inputs: Inputs) -> st.SearchStrategy:
    cache = option("--cache-dir", st.sampled_from([inputs.cache, "newcache"]), ["blocker", "/proc/shap_e_fuzz"])
    return cache.map(lambda c: ["models", *c])


def download_command(inputs: Inputs) -> st.SearchStrategy:
    names = either(st.lists(st.sampled_from(["diffusion", "text-small"]), min_size=1, max_size=2),
                   st.lists(st.sampled_from(["diffusion", "text-small", "nope", "offline-model", "transmitter", ""]),
                            min_size=1, max_size=3))
    cache = option("--cache-dir", st.sampled_from([inputs.cache, "newcache"]), ["blocker", "/proc/shap_e_fuzz"])
    return st.tuples(names, cache, flag("--redownload")).map(lambda t: ["download", *t[0], *t[1], *t[2]])


def dataset_command(inputs: Inputs) -> st.SearchStrategy:
    return st.tuples(
        output_paths("dir"), option("--n", st.integers(1, 2), BAD_INTS, omit=0, good_weight=6),
        option("--split", st.sampled_from(["train", "heldout_pairs", "heldout_paraphrases"]), ["test", ""]),
        option("--seed", st.integers(0, 3), BAD_INTS), flag("--random-yaw"),
    ).map(lambda t: ["dataset", t[0], *_join(*t[1:])])


def latents_command(inputs: Inputs) -> st.SearchStrategy:
    return st.tuples(
        either(st.just(inputs.dataset), st.sampled_from(["missing_data", "exists_dir", inputs.assets["box"]])),
        option("-o", output_paths("safetensors"), omit=0),
        option("--stage", st.sampled_from(["text", "image"]), ["both"], omit=0, good_weight=6),
        option("--transmitter", st.sampled_from(["transmitter-small"]),
               ["nope", inputs.configs["bad_yaml"], "text-small"], omit=0, good_weight=6),
        option("--weights", st.sampled_from([inputs.latents["good"]]), ["missing.safetensors"], omit=10),
        option("--per-asset", st.integers(1, 1), BAD_INTS),
        option("--image-size", st.integers(8, 16), BAD_INTS, omit=0, good_weight=6),
        option("--refine-steps", st.integers(0, 0), BAD_INTS),
        option("--workers", st.integers(1, 1), BAD_INTS),
        option("--text-tokens", st.integers(0, 4), BAD_INTS),
        option("--captions", st.sampled_from(["train", "augmented"]), ["all"]),
        option("--partial-captions", st.sampled_from(["0", "0.5"]), BAD_FLOATS),
        option("--text-layers", st.sampled_from(["0", "0,6"]), ["7", "a,b", "0,0", ""]),
    ).map(lambda t: ["latents", t[0], *_join(*t[1:])])


def train_command(inputs: Inputs) -> st.SearchStrategy:
    """Training commands whose config is broken or missing (a real training run takes minutes)."""
    return st.tuples(
        st.sampled_from(["transmitter", "text", "image"]),
        st.sampled_from(sorted(inputs.configs.values()) + ["missing.yaml", "exists_dir"]),
        flag("--resume"), option("--init", st.sampled_from(["text-small"]), ["nope", "missing.pt"]),
        flag("--prepare-only"), option("--data-workers", st.integers(1, 2), BAD_INTS),
        option("--forward-threads", st.integers(1, 2), BAD_INTS), option("--stop-at", st.integers(1, 2), BAD_INTS),
    ).map(lambda t: ["train", t[0], "--config", t[1], *_join(*t[2:])])


def eval_command(inputs: Inputs) -> st.SearchStrategy:
    def for_task(task: str) -> st.SearchStrategy:
        model = {"reconstruction": "transmitter-small", "text": "text-small", "image": "image-small",
                 "classifier": "transmitter-small"}[task]
        parts = [
            option("--model", st.just(model), ["nope", "diffusion"], omit=0, good_weight=6),
            option("-n", st.just(1), BAD_INTS, omit=0, good_weight=6),
            option("--split", st.sampled_from(["heldout_pairs", "train"]), ["x"]),
            option("--seed", st.integers(0, 2), BAD_INTS),
            option("-o", output_paths("json"), ["out.txt"], omit=0),
            option("--grid-size", st.just(8), BAD_INTS, omit=0, good_weight=6),
            option("--resolution", st.just(8), BAD_INTS, omit=0, good_weight=6),
            option("--steps", st.just(2), BAD_INTS, omit=0, good_weight=6),
            option("--guidance", st.sampled_from(["3"]), BAD_FLOATS),
            option("--batch", st.integers(1, 2), BAD_INTS),
            option("--device", st.just("cpu"), ["cuda", "mps"], omit=8),
            option("--refine-steps", st.just(0), BAD_INTS),
            option("--references", st.just("ground-truth"), ["x"], bad_weight=1),  # others build 120 encodings
        ]
        extra = option("--guidance-max-sigma", st.just("5"), ["0", "nan"]) if task in ("text", "image") else st.just(
            [])
        return st.tuples(*parts, extra).map(lambda t: ["eval", task, *_join(*t)])

    return st.sampled_from(["reconstruction", "text", "image", "classifier"]).flatmap(for_task)


COMMANDS: Dict[str, Callable[[Inputs], st.SearchStrategy]] = {
    "text": text_command, "image": image_command, "encode": encode_command, "decode": decode_command,
    "render": render_command, "models": models_command, "download": download_command, "dataset": dataset_command,
    "latents": latents_command, "train": train_command, "eval": eval_command,
}
# Command lines drawn per subcommand (520 in all): every subcommand is covered in every run, and the
# commands whose successful runs take seconds (eval, latents) are drawn less.
QUOTAS = {"text": 110, "image": 45, "encode": 45, "decode": 65, "render": 55, "models": 15, "download": 25,
          "dataset": 35, "latents": 35, "train": 70, "eval": 20}
