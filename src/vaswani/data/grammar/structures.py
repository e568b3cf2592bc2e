"""The sentence structures that both languages are rendered from."""

from __future__ import annotations

from typing import Literal, NamedTuple

Tense = Literal["present", "past", "future", "progressive", "perfect"]


class Relative(NamedTuple):
    """A relative clause on a noun: exactly one of ``subject`` and ``obj`` is None.

    ``Relative("see", subject=NP("Tom"))`` on "cat" is "the cat that Tom saw"
    (the noun is the object); ``Relative("chase", obj=NP("cat", "the"))`` on
    "dog" is "the dog that chases the cat" (the noun is the subject).
    """

    verb: str
    subject: NP | None = None
    obj: NP | None = None
    past: bool = False


class NP(NamedTuple):
    """A noun phrase: a name, a pronoun (subject form) or a noun with a determiner.

    ``det`` is "" (bare), "the", "a", "this", "that", "some", "many", "no",
    "how many", a number word ("two"), or a possessive ("my", "Tom's").
    ``plural`` turns "this" into "these"; with a container it counts the
    containers ("two cups of tea"). A relative clause needs ``det="the"``.
    """

    head: str
    det: str = ""
    plural: bool = False
    adjective: str = ""
    container: str = ""
    relative: Relative | None = None
    conjunct: str = ""  # a second name: "Tom and Jerry"


Wh = Literal["", "who", "what", "whom", "where", "when", "how many"]


class Clause(NamedTuple):
    """Someone does something: a statement, a yes/no question or a wh-question.

    ``wh``: "who" asks for the subject (``subject=None``); "what" and "whom"
    ask for the object (``obj=None``); "how many" asks for the number of the
    object (``obj`` has ``det="how many"``); "where" and "when" ask for the
    place and time. An intransitive clause has ``obj=None`` and no object wh.
    """

    subject: NP | None
    verb: str
    obj: NP | None = None
    tense: Tense = "present"
    negated: bool = False
    question: bool = False
    wh: Wh = ""
    recipient: NP | None = None
    place: str = ""
    time: str = ""
    adverb: str = ""


class Quality(NamedTuple):
    """An adjective predicate: "The cat is cute", "Tom was not very tired yesterday"."""

    subject: NP
    adjective: str
    negated: bool = False
    question: bool = False
    very: bool = False
    past: bool = False
    time: str = ""


class Comparison(NamedTuple):
    """A comparison with 比: "Tom is taller than Jerry"; ``subject=None`` asks "who"."""

    subject: NP | None
    adjective: str
    other: NP
    negated: bool = False
    question: bool = False


class Identity(NamedTuple):
    """A noun predicate with 是: "Tom is a teacher", "They are my friends"."""

    subject: NP
    noun: NP
    negated: bool = False
    question: bool = False


class Existence(NamedTuple):
    """Something is somewhere: "There is a cat in the garden" → "花园里有一只猫".

    ``thing.det`` "no" negates, "how many" asks for the number.
    """

    thing: NP
    place: str
    past: bool = False
    question: bool = False
    time: str = ""


Sentence = Clause | Quality | Comparison | Identity | Existence
