"""Drawing random sentence structures that the renderers translate unambiguously."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from vaswani.data.grammar.modifiers import ACTIVITY_PLACES, ADJECTIVE_LIST, PLACE_LIST, TIMES_BY_TENSE
from vaswani.data.grammar.nouns import MANY, NAMES, NOUNS, PERSON_POSSESSIVES, PERSON_PRONOUNS, PRONOUNS, Noun
from vaswani.data.grammar.render import render_np
from vaswani.data.grammar.structures import (
    NP,
    Clause,
    Comparison,
    Existence,
    Identity,
    Quality,
    Relative,
    Tense,
)
from vaswani.data.grammar.verbs import ADVERB_LIST, FORMS, VERB_LIST, Verb

T = TypeVar("T")


def _nouns_where(keep: Callable[[Noun], bool]) -> tuple[Noun, ...]:
    return tuple(noun for noun in NOUNS.values() if keep(noun))


_NOUNS_BY_CLASS = {
    cls: _nouns_where(lambda noun, cls=cls: noun.cls == cls) for cls in {noun.cls for noun in NOUNS.values()}
}
_OBJECTS_OF = {
    verb.base: _nouns_where(lambda noun, verb=verb: bool(noun.tags & verb.objects)) for verb in VERB_LIST
}
_COUNTABLE_OBJECTS_OF = {
    base: tuple(noun for noun in nouns if noun.measure) for base, nouns in _OBJECTS_OF.items()
}
_TRANSITIVE = tuple(verb for verb in VERB_LIST if verb.objects and not verb.ditransitive)
_VERBS_TAKING = {
    noun.en: tuple(verb for verb in _TRANSITIVE if noun.tags & verb.objects) for noun in NOUNS.values()
}
_VERBS_DONE_BY = {cls: tuple(v for v in _TRANSITIVE if cls in v.agents) for cls in ("person", "animal")}
_ATTRIBUTIVES = {
    noun.en: tuple(a.en for a in ADJECTIVE_LIST if a.attributive and noun.cls in a.applies_to)
    for noun in NOUNS.values()
}
_PREDICATES = tuple(a for a in ADJECTIVE_LIST if a.predicate)
_COMPARABLES = tuple(a for a in ADJECTIVE_LIST if a.comparative)
_JOBS = tuple(noun.en for noun in NOUNS.values() if "job" in noun.tags)
_EXISTENCE_PLACES = tuple(place for place in PLACE_LIST if place.holds)
_NAME_LIST = tuple(NAMES)
_TENSE_WEIGHTS: dict[Tense, float] = {
    "present": 0.28,
    "past": 0.30,
    "future": 0.14,
    "progressive": 0.14,
    "perfect": 0.14,
}


def _pick(rng: random.Random, options: Sequence[T]) -> T:
    """A uniform choice; several times faster than ``rng.choice``."""
    return options[int(rng.random() * len(options))]


def _weighted(rng: random.Random, options: dict[str, float]) -> str:
    x = rng.random() * sum(options.values())
    for option, weight in options.items():
        x -= weight
        if x < 0:
            return option
    return option


def _sample_name_or_pronoun(rng: random.Random, subject: bool) -> NP:
    r = rng.random()
    if r < 0.7:
        return NP(_pick(rng, _NAME_LIST))
    if subject and r < 0.78:
        first, second = _pick(rng, _NAME_LIST), _pick(rng, _NAME_LIST)
        if first == second:
            return NP(first)
        return NP(first, conjunct=second)
    return NP(_pick(rng, PERSON_PRONOUNS))


def _sample_possessive(rng: random.Random, noun: Noun) -> str:
    """ "my", "Tom's" ...; "the" for people that nobody owns ("the farmer", not "my farmer")."""
    if noun.cls == "person" and "relation" not in noun.tags:
        return "the"
    if rng.random() < 0.6:
        return _pick(rng, PERSON_POSSESSIVES)
    return _pick(rng, _NAME_LIST) + "'s"


def _sample_adjective(rng: random.Random, noun: Noun, chance: float) -> str:
    options = _ATTRIBUTIVES[noun.en]
    return _pick(rng, options) if options and rng.random() < chance else ""


def _sample_mass_np(rng: random.Random, noun: Noun, role: str) -> NP:
    if noun.cls == "subject":  # "Tom studies math", never "the math"
        return NP(noun.en)
    r = rng.random()
    adjective = _sample_adjective(rng, noun, 0.2)
    if role == "object" and noun.containers and r < 0.25:
        container = _pick(rng, noun.containers)
        if rng.random() < 0.5:
            return NP(noun.en, "a", container=container, adjective=adjective)
        return NP(noun.en, _pick(rng, MANY), True, adjective, container)
    if r < 0.6:
        return NP(noun.en, "the", adjective=adjective)
    if role == "subject" or r < 0.75:
        return NP(noun.en, _sample_possessive(rng, noun))
    if r < 0.85:
        return NP(noun.en, "some", adjective=adjective)
    return NP(noun.en, adjective=adjective)


def _sample_count_np(rng: random.Random, noun: Noun, role: str) -> NP:
    """A noun with a determiner; subjects avoid "a" and bare plurals."""
    r = rng.random()
    adjective = _sample_adjective(rng, noun, 0.25)
    if role == "subject":
        r = 0.3 + 0.7 * r
    if r < 0.15:
        return NP(noun.en, "a", adjective=adjective)
    if r < 0.25:
        return NP(noun.en, adjective=adjective, plural=True)
    if r < 0.3:
        return NP(noun.en, _pick(rng, ("some", "many")), True, adjective)
    if r < 0.55:
        return NP(noun.en, "the", rng.random() < 0.25, adjective)
    if r < 0.7:
        if rng.random() < 0.1:
            return NP(noun.en, "one", adjective=adjective)
        return NP(noun.en, _pick(rng, MANY), True, adjective)
    if r < 0.85:
        return NP(noun.en, _pick(rng, ("this", "that")), rng.random() < 0.3, adjective)
    return NP(noun.en, _sample_possessive(rng, noun), rng.random() < 0.25)


def _sample_plain_np(rng: random.Random, noun: Noun, role: str) -> NP:
    if noun.measure:
        return _sample_count_np(rng, noun, role)
    return _sample_mass_np(rng, noun, role)


def _sample_relative_np(rng: random.Random, noun: Noun) -> NP | None:
    """ "the cat that Tom saw" or "the dog that chases the cat", or None if none fits."""
    by_subject = _VERBS_DONE_BY.get(noun.cls, ())
    by_object = _VERBS_TAKING[noun.en]
    if not by_subject and not by_object:
        return None
    plural = rng.random() < 0.25
    if by_subject and (not by_object or rng.random() < 0.5):
        verb = _pick(rng, by_subject)
        obj = _sample_simple_object(rng, verb)
        if obj.head == noun.en:
            return None
        relative = Relative(verb.base, obj=obj, past=_sample_past(rng, verb))
    else:
        verb = _pick(rng, by_object)
        subject = _sample_name_or_pronoun(rng, subject=False)
        relative = Relative(verb.base, subject=subject, past=_sample_past(rng, verb))
    return NP(noun.en, "the", plural, relative=relative)


def _sample_past(rng: random.Random, verb: Verb) -> bool:
    return verb.kind != "state" and rng.random() < 0.6


def _sample_simple_object(rng: random.Random, verb: Verb) -> NP:
    """A short object for a relative clause: a name, a pronoun or "the" noun."""
    noun = _pick(rng, _OBJECTS_OF[verb.base])
    if noun.cls == "person" and rng.random() < 0.6:
        return _sample_name_or_pronoun(rng, subject=False)
    return NP(noun.en, "the")


def _sample_agent(rng: random.Random, verb: Verb) -> NP:
    if "animal" not in verb.agents or rng.random() < 0.7:
        if rng.random() < 0.65:
            return _sample_name_or_pronoun(rng, subject=True)
        noun = _pick(rng, _NOUNS_BY_CLASS["person"])
    else:
        if rng.random() < 0.08:
            return NP("it")
        noun = _pick(rng, _NOUNS_BY_CLASS["animal"])
    if rng.random() < 0.08:
        relative = _sample_relative_np(rng, noun)
        if relative is not None:
            return relative
    return _sample_plain_np(rng, noun, "subject")


def _sample_object(rng: random.Random, verb: Verb, relative_ok: bool) -> NP:
    noun = _pick(rng, _OBJECTS_OF[verb.base])
    if noun.cls == "person" and rng.random() < 0.6:
        return _sample_name_or_pronoun(rng, subject=False)
    if relative_ok and rng.random() < 0.1:
        relative = _sample_relative_np(rng, noun)
        if relative is not None:
            return relative
    return _sample_plain_np(rng, noun, "object")


def _allowed_tenses(verb: Verb, transitive: bool, wh: str) -> dict[str, float]:
    if verb.kind == "state":
        return {"present": 1.0}
    tenses = dict(_TENSE_WEIGHTS)
    if verb.kind == "event" or wh == "where":
        del tenses["progressive"]
    if not transitive or wh == "when":
        del tenses["perfect"]
    if wh == "when":
        tenses.pop("progressive", None)
    return tenses


def _sample_wh(rng: random.Random, verb: Verb, transitive: bool) -> str:
    options = ["who"]
    if transitive:
        options += ["what", "what"]
        if _COUNTABLE_OBJECTS_OF[verb.base]:
            options.append("how many")
    if verb.kind != "state":
        options += ["where", "when"]
    return _pick(rng, options)


def sample_clause(rng: random.Random, form: str, verbs: Sequence[Verb]) -> Clause:
    """A clause with one of ``verbs``; ``form`` is "statement", "yes/no" or "wh"."""
    verb = _pick(rng, verbs)
    transitive = bool(verb.objects) and (not verb.zh_alone or rng.random() < 0.7)
    wh = _sample_wh(rng, verb, transitive) if form == "wh" else ""
    tense: Tense = _weighted(rng, _allowed_tenses(verb, transitive, wh))  # type: ignore[assignment]
    subject = None if wh == "who" else _sample_agent(rng, verb)
    recipient = _sample_name_or_pronoun(rng, False) if verb.ditransitive else None
    obj = None
    if transitive and wh in ("what", "how many"):
        if wh == "how many":
            noun = _pick(rng, _COUNTABLE_OBJECTS_OF[verb.base])
            obj = NP(noun.en, "how many", True)
        elif _pick(rng, _OBJECTS_OF[verb.base]).cls == "person":
            wh = "whom"
    elif transitive:
        obj = _sample_object(rng, verb, relative_ok=True)
    negated = form == "statement" and rng.random() < 0.25
    clause = Clause(subject, verb.base, obj, tense, negated, form != "statement", wh, recipient)  # type: ignore[arg-type]
    return _add_circumstances(rng, clause, verb)


def _add_circumstances(rng: random.Random, clause: Clause, verb: Verb) -> Clause:
    """Adds an adverb ("often"), a place and a time, where they fit.

    Nothing follows an object with a relative clause: in "Tom saw the cat that
    Jerry chased yesterday" the time could belong to either verb.
    """
    ends_in_relative = clause.obj is not None and clause.obj.relative is not None
    if ends_in_relative and _needs_time(clause):
        # "We read the story that Tom wrote" can only be the present
        clause = clause._replace(tense="present")
    tense = clause.tense
    adverb = place = time = ""
    if tense == "present" and not clause.negated and not clause.question and verb.kind != "state":
        adverb = _pick(rng, ADVERB_LIST) if rng.random() < 0.2 else ""
    if not ends_in_relative:
        if verb.kind != "state" and clause.wh != "where" and rng.random() < 0.3:
            place = _pick(rng, ACTIVITY_PLACES)
        chance = {"present": 0.25, "past": 0.5, "future": 0.5}.get(tense, 0.15)
        if verb.kind == "state" or adverb or clause.wh == "when":
            chance = 0.0
        if _needs_time(clause) or rng.random() < chance:
            time = _pick(rng, TIMES_BY_TENSE[tense])
    return clause._replace(adverb=adverb, place=place, time=time)


def _needs_time(clause: Clause) -> bool:
    """Whether the clause would read like the present without a time phrase.

    "They read books" is present; "They read books yesterday" is the past.
    """
    forms = FORMS[clause.verb]
    if clause.tense != "past" or clause.negated or clause.question or forms.past != clause.verb:
        return False
    return clause.subject is not None and render_np(clause.subject)[2] != "3sg"


def _sample_subject_of_class(rng: random.Random, cls: str) -> NP:
    if cls == "person" and rng.random() < 0.7:
        return _sample_name_or_pronoun(rng, subject=True)
    noun = _pick(rng, _NOUNS_BY_CLASS[cls])
    if noun.cls == "subject":
        return NP(noun.en)
    if not noun.measure:
        return NP(noun.en, "the" if rng.random() < 0.7 else _sample_possessive(rng, noun))
    det = _pick(rng, ("the", "the", "this", "that", _sample_possessive(rng, noun)))
    return NP(noun.en, det, rng.random() < 0.2)


def sample_quality(rng: random.Random) -> Quality:
    adjective = _pick(rng, _PREDICATES)
    subject = _sample_subject_of_class(rng, _pick(rng, adjective.applies_to))
    question = rng.random() < 0.25
    negated = not question and rng.random() < 0.3
    past = rng.random() < 0.3
    if past:
        time = _pick(rng, TIMES_BY_TENSE["past"]) if rng.random() < 0.5 else ""
    else:
        time = _pick(rng, TIMES_BY_TENSE["quality"]) if rng.random() < 0.2 else ""
    very = rng.random() < 0.2
    return Quality(subject, adjective.en, negated, question, very, past, time)


def sample_comparison(rng: random.Random) -> Comparison:
    adjective = _pick(rng, _COMPARABLES)
    cls = _pick(rng, adjective.applies_to)
    subject = _sample_subject_of_class(rng, cls)
    other = _sample_subject_of_class(rng, cls)
    while {other.head, other.conjunct} & {subject.head, subject.conjunct} - {""}:
        other = _sample_subject_of_class(rng, cls)  # not "Tom is taller than Tom"
    if cls == "person" and rng.random() < 0.2:
        return Comparison(None, adjective.en, other)
    question = rng.random() < 0.2
    negated = not question and rng.random() < 0.25
    return Comparison(subject, adjective.en, other, negated, question)


def sample_identity(rng: random.Random) -> Identity:
    subject = _sample_name_or_pronoun(rng, subject=True)
    plural = render_np(subject)[2] == "plural" and subject.head != "you"
    job = NOUNS[_pick(rng, _JOBS)]
    det = "a" if not plural else ""
    if "relation" in job.tags and rng.random() < 0.5:
        det = _sample_possessive(rng, job)
        pronoun = PRONOUNS.get(subject.head)
        if det == f"{subject.head}'s" or (pronoun is not None and pronoun.possessive == det):
            det = "a" if not plural else ""
    question = rng.random() < 0.25
    negated = not question and rng.random() < 0.3
    return Identity(subject, NP(job.en, det, plural), negated, question)


def sample_existence(rng: random.Random) -> Existence:
    place = _pick(rng, _EXISTENCE_PLACES)
    noun = _pick(rng, _NOUNS_BY_CLASS[_pick(rng, place.holds)])
    past = rng.random() < 0.25
    time = _pick(rng, TIMES_BY_TENSE["past"]) if past and rng.random() < 0.6 else ""
    r = rng.random()
    if not noun.measure:
        det = "no" if r < 0.25 else "some"
        thing = NP(noun.en, det, adjective=_sample_adjective(rng, noun, 0.2) if det != "no" else "")
        return Existence(thing, place.en, past, r > 0.8, time)
    if r < 0.2:
        return Existence(NP(noun.en, "no", rng.random() < 0.5), place.en, past, False, time)
    if r < 0.35:
        return Existence(NP(noun.en, "how many", True), place.en, past, True, time)
    adjective = _sample_adjective(rng, noun, 0.2)
    det = _pick(rng, ("a", "a", "some", "many", *MANY))
    thing = NP(noun.en, det, det != "a", adjective)
    return Existence(thing, place.en, past, r > 0.8, time)
