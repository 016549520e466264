"""How much of a caption's category and colour can a text prior read from its sentence embedding?

    python -m bench.caption_probe --n-train 640 --per-asset 16 --n-eval 480 [--pooling attention]

A linear probe (multinomial logistic regression) is fit on the sentence embeddings of the text
prior's own training captions (`shap_e.train.latents.training_captions` of the `train` split), one
probe for the category and one for the primary colour. It is then scored on the captions of the
held-out splits: `heldout_pairs` (unseen category-colour pairs, training vocabulary) and
`heldout_paraphrases` (held-out templates and synonyms). A probe is no prior, but where the probe
cannot read the colour off an embedding, a prior conditioned on that embedding has nothing to read
either. Reported: accuracy per split, on the captions that name two colours, and per colour word
of the one-colour paraphrase captions; also the nearest core colour name of every held-out colour
synonym by cosine similarity (`"a {word} cube"` against `"a {colour} cube"`), and, layer by layer,
how many held-out colour and category synonyms lie nearest the centroid of their own training
synonyms (each word's state in `"a {word} thing"`; `heldout_words_by_layer`). Writes
`caption_probe_<pooling>_<time>.json` and `.md` to `--out-dir` and prints the tables.

With `--pooling attention` the probes read the encoder's token states instead of their mean: each
probe learns one attention query that pools the tokens, then a linear read-out. That is what a prior
conditioned on the token sequence could read (word order included), where the mean-pooled embedding
is what a prior reading one sentence embedding is conditioned on.

`--captions augmented` fits the probes on the text prior's own training captions (the recipe's
`shap-e latents --captions augmented`), and `--layers 0` (with `--pooling attention`) reads the token
states of MiniLM's embedding layer, as `text-small` does.
"""
import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from shap_e.data import COLOURS, iter_dataset
from shap_e.data.captions import CATEGORY_SYNONYMS, COLOUR_SYNONYMS
from shap_e.data.shapes import CATEGORIES
from shap_e.train.latents import CAPTION_VOCABULARIES, training_captions
from shap_e.util.atomic import write_atomic

ROOT = Path(__file__).resolve().parent.parent
EVAL_SPLITS = ("heldout_pairs", "heldout_paraphrases")
POOLINGS = ("mean", "attention")
Embed = Callable[[List[str]], torch.Tensor]  # captions -> [n, width] float32
TokenStates = Callable[[List[str]], Tuple[torch.Tensor, torch.Tensor]]  # -> [n, tokens, width], [n, tokens] bool
WordStates = Callable[[List[str]], torch.Tensor]  # words -> [n_words, layers, width]


def embed_all(embed: Embed, texts: Sequence[str], chunk: int = 256) -> torch.Tensor:
    """`[len(texts), width]` embeddings, `chunk` captions per call."""
    with torch.no_grad():
        return torch.cat([embed(list(texts[i:i + chunk])).float() for i in range(0, len(texts), chunk)])


def token_states_all(token_states: TokenStates, texts: Sequence[str], chunk: int = 256) -> Tuple[torch.Tensor, torch.Tensor]:
    """`[len(texts), tokens, width]` states and `[len(texts), tokens]` mask, chunks padded to the longest."""
    with torch.no_grad():
        parts = [token_states(list(texts[i:i + chunk])) for i in range(0, len(texts), chunk)]
    length = max(states.shape[1] for states, _ in parts)
    states = torch.cat([torch.nn.functional.pad(h.float(), (0, 0, 0, length - h.shape[1])) for h, _ in parts])
    mask = torch.cat([torch.nn.functional.pad(m.long(), (0, length - m.shape[1])).bool() for _, m in parts])
    return states, mask


def fit_attention_probe(features: Tuple[torch.Tensor, torch.Tensor], labels: torch.Tensor, n_classes: int,
                        steps: int = 400, lr: float = 3e-3, batch_size: int = 512, seed: int = 0):
    """One learned attention query pools `states [n, tokens, width]` over the `mask`ed tokens, then a
    linear read-out; minibatch Adam. Returns `(states, mask) -> [n]` predictions."""
    states, mask = features
    torch.manual_seed(seed)
    query, readout = torch.nn.Linear(states.shape[2], 1), torch.nn.Linear(states.shape[2], n_classes)

    def logits(h: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        weights = query(h).squeeze(-1).masked_fill(~m, float("-inf")).softmax(dim=-1)  # [n, tokens]
        return readout((weights.unsqueeze(-1) * h).sum(dim=1))

    optimizer = torch.optim.Adam([*query.parameters(), *readout.parameters()], lr=lr)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        index = torch.randint(0, len(labels), (min(batch_size, len(labels)),), generator=generator)
        loss = torch.nn.functional.cross_entropy(logits(states[index], mask[index]), labels[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def predict(z: Tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            return logits(*z).argmax(dim=1)

    return predict


def fit_linear_probe(x: torch.Tensor, labels: torch.Tensor, n_classes: int, steps: int = 300,
                     lr: float = 1e-2, weight_decay: float = 1e-4, seed: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    """Logistic regression of `labels [n]` on `x [n, width]` (full-batch Adam); returns `x -> [n]` predictions."""
    torch.manual_seed(seed)
    weight = torch.zeros(x.shape[1], n_classes, requires_grad=True)
    bias = torch.zeros(n_classes, requires_grad=True)
    optimizer = torch.optim.Adam([weight, bias], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(x @ weight + bias, labels) + weight_decay * weight.square().sum()
        loss.backward()
        optimizer.step()
    weight, bias = weight.detach(), bias.detach()
    return lambda z: (z @ weight + bias).argmax(dim=1)


def minilm_word_states(encoder) -> WordStates:
    """Each word's state at every layer of a `SentenceEncoder` (input embeddings first): the mean over
    the word's word pieces in the caption "a {word} thing", found by their ids in the caption."""
    def states(word_list: List[str]) -> torch.Tensor:
        out = []
        with torch.no_grad():
            for word in word_list:
                batch = encoder.tokenizer([f"a {word} thing"], return_tensors="pt")
                ids = batch["input_ids"][0].tolist()
                pieces = list(encoder.tokenizer(word, add_special_tokens=False)["input_ids"])
                start = next((i for i in range(len(ids)) if ids[i:i + len(pieces)] == pieces), None)
                if not pieces or start is None:
                    raise ValueError(f"the word pieces of {word!r} do not appear in the caption 'a {word} thing'")
                hidden = encoder.model(**batch, output_hidden_states=True).hidden_states  # per layer [1, tokens, width]
                out.append(torch.stack([h[0, start:start + len(pieces)].float().mean(dim=0) for h in hidden]))
        return torch.stack(out)

    return states


def heldout_words_by_layer(word_states: WordStates, table: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]]) -> List[int]:
    """Per layer, how many held-out synonyms of `table` (`COLOUR_SYNONYMS`, `CATEGORY_SYNONYMS`) are
    nearest (cosine) to the centroid of their own key's training synonyms among all keys' centroids."""
    keys = list(table)
    train = [(key, word) for key in keys for word in table[key][0]]
    heldout = [(key, word) for key in keys for word in table[key][1]]
    train_states, heldout_states = word_states([w for _, w in train]), word_states([w for _, w in heldout])
    owners = torch.tensor([keys.index(key) for key, _ in train])
    truth = torch.tensor([keys.index(key) for key, _ in heldout])
    right = []
    for layer in range(train_states.shape[1]):
        centroids = torch.stack([train_states[owners == k, layer].mean(dim=0) for k in range(len(keys))])
        cosine = torch.nn.functional.normalize(heldout_states[:, layer], dim=-1) @ \
            torch.nn.functional.normalize(centroids, dim=-1).T
        right.append(int((cosine.argmax(dim=1) == truth).sum()))
    return right


def _two_colour(colours: Sequence[str]) -> bool:
    return len(colours) == 2 and colours[0] != colours[1]


def _colour_word(caption: str, colour: str) -> str:
    train, heldout = COLOUR_SYNONYMS[colour]
    padded = f" {caption.replace(',', ' ')} "
    found = [w for w in train + heldout if f" {w} " in padded]
    return max(found, key=len) if found else "?"


def caption_probe(embed: Embed, n_train: int = 640, per_asset: int = 16, n_eval: int = 480, seed: int = 0,
                  token_states: Optional[TokenStates] = None, word_states: Optional[WordStates] = None,
                  captions: str = "train") -> Dict[str, Any]:
    """Fit the probes on `n_train` training assets x `per_asset` captions; score `n_eval` captions per held-out split.

    captions: the vocabulary of the training captions (`training_captions`' `vocabulary`: "train",
        or "augmented" as `shap-e latents --captions augmented` draws the text prior's own captions).

    token_states: when given, the probes are attention-pooled over these token states
        (`fit_attention_probe`) instead of linear on `embed`; the nearest-colour table still uses `embed`.
    word_states: when given, `heldout_words_by_layer` for colours and categories is added.
    """
    for name, value in (("n_train", n_train), ("per_asset", per_asset), ("n_eval", n_eval)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    categories, colours = list(CATEGORIES), list(COLOURS)
    texts, category_labels, colour_labels = [], [], []
    for asset in iter_dataset("train", n_train, seed):
        record = dict(category=asset.category, colours=list(asset.colours), proportion=asset.proportion,
                      caption=asset.caption, seed=asset.seed)
        for text in training_captions(record, per_asset, seed, captions):
            texts.append(text)
            category_labels.append(categories.index(asset.category))
            colour_labels.append(colours.index(asset.colours[0]))
    if token_states is None:
        features = lambda t: embed_all(embed, t)  # noqa: E731
        fit = fit_linear_probe
    else:
        features = lambda t: token_states_all(token_states, t)  # noqa: E731
        fit = fit_attention_probe
    x = features(texts)
    category_probe = fit(x, torch.tensor(category_labels), len(categories), seed=seed)
    colour_probe = fit(x, torch.tensor(colour_labels), len(colours), seed=seed)

    result: Dict[str, Any] = dict(n_train_captions=len(texts), splits={})
    for split in EVAL_SPLITS:
        assets = list(iter_dataset(split, n_eval, seed))
        z = features([a.caption for a in assets])
        category_ok = category_probe(z) == torch.tensor([categories.index(a.category) for a in assets])
        predicted = colour_probe(z)
        colour_ok = predicted == torch.tensor([colours.index(a.colours[0]) for a in assets])
        two = torch.tensor([_two_colour(a.colours) for a in assets])
        per_word, per_word_n = Counter(), Counter()
        for asset, ok in zip(assets, colour_ok.tolist()):
            if not _two_colour(asset.colours):
                word = _colour_word(asset.caption, asset.colours[0])
                per_word_n[word] += 1
                per_word[word] += int(ok)
        result["splits"][split] = dict(
            n=len(assets), category=category_ok.float().mean().item(), colour=colour_ok.float().mean().item(),
            n_two_colour=int(two.sum()), colour_two_colour=colour_ok[two].float().mean().item() if two.any() else None,
            colour_one_colour=colour_ok[~two].float().mean().item(),
            colour_by_word={w: [per_word[w], per_word_n[w]] for w in sorted(per_word_n)},
        )
    pairs = [(word, colour) for colour in colours for word in COLOUR_SYNONYMS[colour][1]]
    similarity = embed_all(embed, [f"a {w} cube" for w, _ in pairs]) @ embed_all(embed, [f"a {c} cube" for c in colours]).T
    result["heldout_colour_words_nearest"] = {
        word: dict(colour=colour, nearest=colours[int(row.argmax())]) for (word, colour), row in zip(pairs, similarity)
    }
    if word_states is not None:
        result["heldout_words_nearest_centroid_by_layer"] = {
            name: dict(right=heldout_words_by_layer(word_states, table), n=sum(len(v[1]) for v in table.values()))
            for name, table in (("colour", COLOUR_SYNONYMS), ("category", CATEGORY_SYNONYMS))
        }
    return result


def markdown(result: Dict[str, Any], settings: Dict[str, Any]) -> str:
    pooled = "attention-pooled token states" if settings.get("pooling") == "attention" else "mean-pooled embeddings"
    lines = [f"# Caption probe: read-out of MiniLM caption {pooled}", ""]
    lines += [f"- {k}: {v}" for k, v in settings.items()]
    lines += [f"- training captions: {result['n_train_captions']}", "",
              "| split | n | category | colour | colour, one-colour captions | colour, two-colour captions (n) |",
              "|---|---|---|---|---|---|"]
    for split, r in result["splits"].items():
        two = "-" if r["colour_two_colour"] is None else f"{r['colour_two_colour']:.3f} ({r['n_two_colour']})"
        lines.append(f"| {split} | {r['n']} | {r['category']:.3f} | {r['colour']:.3f} | {r['colour_one_colour']:.3f} | {two} |")
    words = result["splits"]["heldout_paraphrases"]["colour_by_word"]
    lines += ["", "Colour read right per colour word (one-colour paraphrase captions):", "",
              "| word | right / n |", "|---|---|"]
    lines += [f"| {w} | {ok} / {n} |" for w, (ok, n) in words.items()]
    nearest = result["heldout_colour_words_nearest"]
    hits = sum(v["colour"] == v["nearest"] for v in nearest.values())
    lines += ["", f"Held-out colour synonyms whose nearest colour name is their own: {hits} / {len(nearest)}", "",
              "| word | colour | nearest |", "|---|---|---|"]
    lines += [f"| {w} | {v['colour']} | {v['nearest']} |" for w, v in nearest.items()]
    by_layer = result.get("heldout_words_nearest_centroid_by_layer")
    if by_layer:
        lines += ["", "Held-out synonyms nearest the centroid of their own training synonyms, per layer "
                  "(0 = input embeddings):", "", "| synonyms | right per layer (of n) |", "|---|---|"]
        lines += [f"| {name} | {' / '.join(map(str, v['right']))} (of {v['n']}) |" for name, v in by_layer.items()]
    return "\n".join(lines) + "\n"


def layers_encoder(parser: argparse.ArgumentParser, layers: Optional[str]):
    """The package's MiniLM reading the hidden states named by a `--layers I,J` value (None: the last
    layer); a malformed value or a layer MiniLM lacks ends the command with a usage error."""
    from shap_e.models.sentence_encoder import SentenceEncoder

    try:
        return SentenceEncoder.from_package(layers=None if layers is None else [int(i) for i in layers.split(",")])
    except ValueError as e:
        parser.error(f"--layers {layers}: {e}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-train", type=int, default=640)
    parser.add_argument("--per-asset", type=int, default=16)
    parser.add_argument("--n-eval", type=int, default=480)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pooling", choices=POOLINGS, default="mean",
                        help="mean: linear probe on the sentence embedding; attention: attention-pooled probe on "
                        "the token states (what text-small reads)")
    parser.add_argument("--captions", choices=CAPTION_VOCABULARIES, default="train",
                        help="vocabulary of the training captions (augmented: the text-small recipe's)")
    parser.add_argument("--layers", metavar="I,J",
                        help="with --pooling attention: the MiniLM hidden states the probes read, concatenated "
                        "(0: the embedding layer, as text-small reads them; default: the last layer)")
    parser.add_argument("--out-dir", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    if args.layers is not None and args.pooling != "attention":
        parser.error("--layers applies to the token states of --pooling attention")
    from shap_e.models.sentence_encoder import SentenceEncoder

    encoder = SentenceEncoder.from_package()
    state_encoder = encoder if args.layers is None else layers_encoder(parser, args.layers)
    torch.set_num_threads(1)
    settings = dict(n_train=args.n_train, per_asset=args.per_asset, n_eval=args.n_eval, seed=args.seed,
                    pooling=args.pooling, captions=args.captions, layers=args.layers or "last",
                    threads=torch.get_num_threads())
    result = caption_probe(encoder.embed_text, args.n_train, args.per_asset, args.n_eval, args.seed,
                           token_states=state_encoder.token_states if args.pooling == "attention" else None,
                           word_states=minilm_word_states(encoder), captions=args.captions)
    text = markdown(result, settings)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"caption_probe_{args.pooling}_{time.strftime('%Y%m%d-%H%M%S')}"
    write_atomic(stem.with_suffix(".json"), json.dumps(dict(settings=settings, result=result), indent=1))
    write_atomic(stem.with_suffix(".md"), text)
    print(text)


if __name__ == "__main__":
    main()
