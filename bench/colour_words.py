"""Can a read-out of the sentence encoder's states name a colour word the text prior never saw?

    python -m bench.colour_words [--per-word 12] [--steps 500] [--layers 0]

For each caption vocabulary a text prior may train on (`shap-e latents --captions augmented|extended`),
a linear probe (multinomial logistic regression) learns to name the colour of every colour word of
that vocabulary from the word's state in captions built from the training templates ("a photo of a
maroon chair"). It is then scored on the 12 held-out colour words ("ruby", "jade", ...) in captions
built from the held-out templates ("behold: a ruby chair"). The features are the word's last-layer
state (mean over its word pieces) beside the caption's mean state, standardised: what a prior reading
the token states can see of the word. A probe is no prior, but a vocabulary whose probe cannot name
the held-out words gives the prior nothing to generalise from either (docs/findings/text-small.md).
`--layers` reads other hidden states than the last (0: the embedding layer's output, each word
piece's lexical vector; several are concatenated), as a prior with `text_layers:` does.

A second table names each held-out colour word by its nearest word of the vocabulary (cosine of the
encoder's sentence embeddings of the bare words): what replacing an unseen prompt word by the nearest
known one, before the prior reads the prompt, would give.
"""
import argparse
import random
from typing import Callable, Dict, List, Sequence, Tuple

import torch

from bench.caption_probe import fit_linear_probe, layers_encoder
from shap_e.data.captions import (
    AUGMENT_COLOUR_SYNONYMS,
    COLOUR_SYNONYMS,
    EXTENDED_COLOUR_SYNONYMS,
    HELDOUT_TEMPLATES,
    TRAIN_TEMPLATES,
)

NOUNS = ("cube", "ball", "chair", "table", "cylinder", "pyramid", "mushroom", "lamp", "capsule", "cone", "ring", "snowman")
WordFeatures = Callable[[str, str], torch.Tensor]  # (caption, colour word in it) -> [width]
Embed = Callable[[List[str]], torch.Tensor]  # texts -> [n, width]


def vocabularies() -> Dict[str, List[Tuple[str, str]]]:
    """(colour, word) pairs of each training caption vocabulary's colour words."""
    augmented = [(c, w) for c in COLOUR_SYNONYMS for w in COLOUR_SYNONYMS[c][0] + AUGMENT_COLOUR_SYNONYMS[c]]
    return {"augmented": augmented,
            "extended": augmented + [(c, w) for c in COLOUR_SYNONYMS for w in EXTENDED_COLOUR_SYNONYMS[c]]}


def heldout_words() -> List[Tuple[str, str]]:
    return [(c, w) for c in COLOUR_SYNONYMS for w in COLOUR_SYNONYMS[c][1]]


def captions_for(pairs: Sequence[Tuple[str, str]], templates: Sequence[str], per_word: int,
                 rng: random.Random) -> List[Tuple[str, str, str]]:
    """`per_word` (caption, word, colour) triples per pair: a random template and noun around the word."""
    out = []
    for colour, word in pairs:
        for _ in range(per_word):
            phrase = f"{word} {rng.choice(NOUNS)}"
            article = "an" if phrase[0] in "aeiou" else "a"
            text = rng.choice(templates).replace("{a_np}", f"{article} {phrase}").replace("{np}", phrase)
            out.append((text, word, colour))
    return out


def minilm_word_features(encoder) -> WordFeatures:
    """The word's state (mean over its word pieces) and the caption's mean state, `[2 * embedding_dim]`,
    from a `SentenceEncoder`'s token states (its `layers`; special tokens excluded from the mean)."""
    def features(text: str, word: str) -> torch.Tensor:
        batch = encoder.tokenizer([text], return_tensors="pt")
        ids = batch["input_ids"][0].tolist()
        pieces = list(encoder.tokenizer(" " + word, add_special_tokens=False)["input_ids"])
        start = next((i for i in range(len(ids)) if ids[i:i + len(pieces)] == pieces), None)
        if not pieces or start is None:
            raise ValueError(f"the word pieces of {word!r} do not appear in the caption {text!r}")
        hidden = encoder.token_states([text])[0][0]  # [tokens, width]
        return torch.cat([hidden[start:start + len(pieces)].mean(dim=0), hidden[1:-1].mean(dim=0)])

    return features


def colour_word_probe(features: WordFeatures, per_word: int = 12, steps: int = 500, seed: int = 0) -> Dict[str, dict]:
    """Per vocabulary: how many held-out captions the probe gives the right colour, overall and per word."""
    colours = list(COLOUR_SYNONYMS)
    heldout = captions_for(heldout_words(), HELDOUT_TEMPLATES, per_word, random.Random(seed))
    x_heldout = torch.stack([features(text, word) for text, word, _ in heldout])
    results = {}
    for name, pairs in vocabularies().items():
        train = captions_for(pairs, TRAIN_TEMPLATES, per_word, random.Random(seed + 1))
        x = torch.stack([features(text, word) for text, word, _ in train])
        mean, std = x.mean(dim=0), x.std(dim=0) + 1e-6
        labels = torch.tensor([colours.index(colour) for *_, colour in train])
        predict = fit_linear_probe((x - mean) / std, labels, len(colours), steps=steps, weight_decay=1e-3, seed=seed)
        right = predict((x_heldout - mean) / std) == torch.tensor([colours.index(c) for *_, c in heldout])
        per_word_right = {word: int(right[i * per_word:(i + 1) * per_word].sum()) for i, (_, word) in enumerate(heldout_words())}
        results[name] = dict(n_words=len(pairs), accuracy=round(float(right.float().mean()), 4), per_word=per_word_right)
    return results


def nearest_word_colours(embed: Embed) -> Dict[str, dict]:
    """Per vocabulary: the vocabulary word nearest each held-out colour word, and how many of the 12
    it gives the right colour."""
    heldout = heldout_words()
    queries = torch.nn.functional.normalize(embed([w for _, w in heldout]), dim=-1)
    results = {}
    for name, pairs in vocabularies().items():
        keys = torch.nn.functional.normalize(embed([w for _, w in pairs]), dim=-1)
        nearest = (queries @ keys.T).argmax(dim=1).tolist()
        results[name] = dict(nearest={word: pairs[j][1] for (_, word), j in zip(heldout, nearest)},
                             right=sum(pairs[j][0] == colour for (colour, _), j in zip(heldout, nearest)))
    return results


def markdown(results: Dict[str, dict], per_word: int) -> str:
    words = [w for _, w in heldout_words()]
    lines = [f"| vocabulary | colour words | held-out captions named right | {' | '.join(words)} |",
             "|---|---|---|" + "---|" * len(words)]
    for name, r in results.items():
        cells = " | ".join(f"{r['per_word'][w]}/{per_word}" for w in words)
        lines.append(f"| {name} | {r['n_words']} | {r['accuracy']:.1%} | {cells} |")
    return "\n".join(lines)


def nearest_markdown(results: Dict[str, dict]) -> str:
    lines = ["| vocabulary | held-out colour words named right by the nearest word | nearest words |", "|---|---|---|"]
    for name, r in results.items():
        pairs = ", ".join(f"{word} → {near}" for word, near in r["nearest"].items())
        lines.append(f"| {name} | {r['right']}/{len(r['nearest'])} | {pairs} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-word", type=int, default=12, help="captions per colour word")
    parser.add_argument("--steps", type=int, default=500, help="probe optimiser steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", metavar="I,J",
                        help="MiniLM hidden states the probe reads, concatenated (0: the embedding layer; "
                             "default: the last layer)")
    args = parser.parse_args(argv)
    if args.per_word < 1 or args.steps < 1:
        parser.error(f"--per-word and --steps must be positive, got {args.per_word} and {args.steps}")
    from shap_e.models.sentence_encoder import SentenceEncoder

    probe_encoder = layers_encoder(parser, args.layers)
    torch.set_num_threads(1)
    results = colour_word_probe(minilm_word_features(probe_encoder), args.per_word, args.steps, args.seed)
    print(f"threads: {torch.get_num_threads()}, layers: {args.layers or 'last'}\n" + markdown(results, args.per_word))
    encoder = SentenceEncoder.from_package()
    print("\n" + nearest_markdown(nearest_word_colours(encoder.embed_text)))


if __name__ == "__main__":
    main()
