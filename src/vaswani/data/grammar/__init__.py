"""The embedded default corpus: English sentences and their Chinese translations.

Nothing is downloaded: the pairs are generated at run time from a small
*synchronous grammar*. Every sentence is first sampled as a structure (who does
what to whom, in which tense, where, when, asked how), and that one structure
is then rendered twice, once in English and once in Chinese, by two sets of
rules. The Chinese rendering is a pure function of the structure, and the
grammar never lets two structures with different translations share an English
sentence, so the same English sentence always gets the same Chinese sentence.
That makes the task learnable to a near-perfect BLEU by a small Transformer,
while still exercising what makes English→Chinese translation hard:

* **Word order.** Relative clauses precede their noun ("the cat that Tom saw"
  → "汤姆看见的猫", "the boy who chases the cat" → "追逐猫的男孩"); time and
  place phrases move before the verb ("Tom reads books in the library" →
  "汤姆在图书馆看书", "Tom ate rice yesterday" → "汤姆昨天吃了米饭");
  existential sentences put the place first ("There is a cat in the garden"
  → "花园里有一只猫"); comparisons use 比 ("Tom is taller than Jerry" →
  "汤姆比杰瑞高").
* **Tense and aspect.** Past takes 了, progressive 在 (正在 before a place
  phrase), experiential perfect 过, future 会: "Tom is chasing Jerry" →
  "汤姆在追逐杰瑞", "Tom has seen the film" → "汤姆看过电影".
* **Negation.** 不 for the present and future, 没 for the past and the
  perfect (and always for 有): "Tom did not eat" → "汤姆没吃饭", "Tom does not
  have a cat" → "汤姆没有猫", "Tom is not taller than Jerry" → "汤姆没有杰瑞高".
* **Measure words.** Every count noun has its classifier (只, 本, 个, 辆, 张,
  把, 条, 朵 ...), used after numbers and demonstratives, with 两 (not 二)
  for two: "two books" → "两本书", "this car" → "这辆汽车", "three cups of tea"
  → "三杯茶".
* **Adjectives.** Each adjective has one fixed attributive form, bare or with
  的: "a big dog" → "一只大狗", "a beautiful flower" → "一朵漂亮的花"; as a
  predicate it takes 很: "the cat is cute" → "猫很可爱".
* **Questions.** Yes/no questions end in 吗 ("Does Tom chase Jerry?" →
  "汤姆追逐杰瑞吗？"); question words stay where the answer would be ("What
  does Tom eat?" → "汤姆吃什么？", "Who chases Jerry?" → "谁追逐杰瑞？",
  "Where does Tom read?" → "汤姆在哪里看书？", "How many cats does Tom have?"
  → "汤姆有几只猫？").

Conventions: English starts with a capital letter and separates words by single
spaces; Chinese has no spaces. Statements carry no final punctuation on either
side ("Tom chases Jerry" → "汤姆追逐杰瑞"); questions end in "?" and "？".
English sentences have 3 to 16 words, with correct agreement, irregular verb
forms, plurals and "a"/"an".

Some deliberate, deterministic simplifications: "the" is not translated
("the film" → "电影"), "a" is 一 plus the measure word except under negation
("Tom did not buy a car" → "汤姆没买汽车") and after "is" ("Tom is a teacher"
→ "汤姆是老师"), "they" is always 他们, and a relative clause is rendered the
same in the present and the past. Where English itself would be ambiguous the
grammar does not go: "They read books" is only ever the present (the past always
has a time phrase: "They read books yesterday"), and nothing follows an object
that has a relative clause (in "Tom saw the cat that Jerry chased yesterday" the
time could belong to either verb).

The package: :mod:`~vaswani.data.grammar.nouns`, :mod:`~vaswani.data.grammar.verbs`
and :mod:`~vaswani.data.grammar.modifiers` hold the lexicon,
:mod:`~vaswani.data.grammar.structures` the sentence structures,
:mod:`~vaswani.data.grammar.render` the two renderings of a structure and
:mod:`~vaswani.data.grammar.sampling` the random draws; this module mixes the
kinds of sentences and builds the corpus.

Public API: :class:`ParallelCorpus`, :func:`generate_pairs` and
:func:`default_corpus`. The sentence structures (:class:`NP`, :class:`Clause`
...) and :func:`render` are exposed so that tests and examples can translate a
hand-built sentence, e.g.
``render(Clause(NP("Tom"), "chase", NP("Jerry")))`` gives
``("Tom chases Jerry", "汤姆追逐杰瑞")``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from vaswani.data.grammar.render import render
from vaswani.data.grammar.sampling import (
    sample_clause,
    sample_comparison,
    sample_existence,
    sample_identity,
    sample_quality,
)
from vaswani.data.grammar.structures import (
    NP,
    Clause,
    Comparison,
    Existence,
    Identity,
    Quality,
    Relative,
    Sentence,
)
from vaswani.data.grammar.verbs import VERB_LIST as _VERB_LIST
from vaswani.data.grammar.verbs import VERBS as _VERBS  # noqa: F401  (tests narrow _VERB_LIST with it)
from vaswani.errors import ConfigError

__all__ = [
    "MAX_PAIRS",
    "NP",
    "Clause",
    "Comparison",
    "Existence",
    "Identity",
    "ParallelCorpus",
    "Quality",
    "Relative",
    "Sentence",
    "default_corpus",
    "generate_pairs",
    "render",
]

MAX_PAIRS = 500_000
"""The most pairs :func:`generate_pairs` agrees to generate (about 8 s of work)."""

MIN_WORDS, MAX_WORDS = 3, 16
PROGRESS_EVERY = 1000
"""How often (in pairs) :func:`generate_pairs` tells its ``progress`` the count."""

# Looked up in this module at call time, so that they can be narrowed (tests
# monkeypatch them): clauses take their verb from _VERB_LIST, and
# generate_pairs draws each sentence with _sample_sentence.
_SENTENCE_KINDS = (
    (0.38, lambda rng: sample_clause(rng, "statement", _VERB_LIST)),
    (0.12, lambda rng: sample_clause(rng, "yes/no", _VERB_LIST)),
    (0.17, lambda rng: sample_clause(rng, "wh", _VERB_LIST)),
    (0.09, sample_quality),
    (0.08, sample_comparison),
    (0.06, sample_identity),
    (0.10, sample_existence),
)


def _sample_sentence(rng: random.Random) -> Sentence:
    x = rng.random()
    for weight, sample in _SENTENCE_KINDS:
        x -= weight
        if x < 0:
            return sample(rng)
    return sample_existence(rng)


@dataclass(frozen=True)
class ParallelCorpus:
    """Train, validation and test pairs (english, chinese); no English sentence is shared."""

    train: list[tuple[str, str]]
    valid: list[tuple[str, str]]
    test: list[tuple[str, str]]


def _check_size(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")


def generate_pairs(
    n: int, seed: int = 0, progress: Callable[[int], None] | None = None
) -> list[tuple[str, str]]:
    """n distinct (english, chinese) pairs, deterministic for the seed; ``progress`` is told the
    count so far every :data:`PROGRESS_EVERY` pairs.

    The pairs come in generation order, so the first k pairs for a seed do not
    depend on n. Raises ``ConfigError`` (a ``ValueError``) when n is negative
    or larger than :data:`MAX_PAIRS`.
    """
    _check_size("n", n)
    if n > MAX_PAIRS:
        raise ConfigError(
            f"cannot generate {n} distinct sentence pairs: the built-in grammar "
            f"gives at most {MAX_PAIRS} in reasonable time"
        )
    rng = random.Random(seed)
    pairs: dict[str, str] = {}
    max_draws = 3 * n + 1000
    for _ in range(max_draws):
        if len(pairs) >= n:
            break
        english, chinese = render(_sample_sentence(rng))
        if not MIN_WORDS <= english.count(" ") + 1 <= MAX_WORDS:
            continue
        before = len(pairs)
        known = pairs.setdefault(english, chinese)
        if known != chinese:
            raise RuntimeError(f"grammar bug: {english!r} translates to {known!r} and {chinese!r}")
        if progress is not None and len(pairs) > before and len(pairs) % PROGRESS_EVERY == 0:
            progress(len(pairs))
    if len(pairs) < n:
        raise ConfigError(
            f"the built-in grammar produced only {len(pairs)} distinct sentences "
            f"in {max_draws} draws; ask for fewer than {n}"
        )
    return list(pairs.items())


def default_corpus(
    seed: int = 0,
    n_train: int = 60_000,
    n_valid: int = 500,
    n_test: int = 1_000,
    progress: Callable[[int], None] | None = None,
) -> ParallelCorpus:
    """Deterministic splits with no English sentence shared between any two splits (``progress``:
    as :func:`generate_pairs` tells it).

    The test split is drawn first and the validation split next, so both stay
    the same when only ``n_train`` changes.
    """
    for name, size in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test)):
        _check_size(name, size)
    pairs = generate_pairs(n_test + n_valid + n_train, seed, progress)
    return ParallelCorpus(
        train=pairs[n_test + n_valid :],
        valid=pairs[n_test : n_test + n_valid],
        test=pairs[:n_test],
    )
