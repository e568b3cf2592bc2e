"""Rendering a sentence structure as an (english, chinese) pair."""

from __future__ import annotations

from vaswani.data.grammar.modifiers import ADJECTIVES, PLACES, TIMES
from vaswani.data.grammar.nouns import (
    CONTAINERS,
    NAMES,
    NOUNS,
    NUMBERS,
    POSSESSIVES,
    PRONOUNS,
    Agreement,
    Noun,
)
from vaswani.data.grammar.structures import (
    NP,
    Clause,
    Comparison,
    Existence,
    Identity,
    Quality,
    Sentence,
    Tense,
)
from vaswani.data.grammar.verbs import ADVERBS, FORMS, VERBS, Verb, VerbForms


def _join(*words: str) -> str:
    return " ".join(filter(None, words))


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _be(agreement: Agreement, past: bool = False) -> str:
    if past:
        return "was" if agreement != "plural" else "were"
    return {"1sg": "am", "3sg": "is", "plural": "are"}[agreement]


def render_np(np: NP, case: str = "subject", negated: bool = False) -> tuple[str, str, Agreement]:
    """English, Chinese and verb agreement of a noun phrase.

    Under negation "a" loses its 一 + measure word ("没有猫") and "some" becomes
    "any" ("did not eat any rice" → "没吃米饭").
    """
    pronoun = PRONOUNS.get(np.head)
    if pronoun is not None:
        english = pronoun.subject if case == "subject" else pronoun.object
        return english, pronoun.zh, pronoun.agreement
    name = NAMES.get(np.head)
    if name is not None:
        if np.conjunct:
            return f"{np.head} and {np.conjunct}", f"{name}和{NAMES[np.conjunct]}", "plural"
        return np.head, name, "3sg"
    if np.relative is not None:
        return _render_relative_np(np)
    return _render_common_np(np, negated)


def _render_core(np: NP, noun: Noun) -> tuple[str, str, str]:
    """The phrase after the determiner, in English and Chinese, and its measure word."""
    if np.container:
        english = noun.plural if noun.measure else noun.en
    else:
        english = noun.plural if np.plural else noun.en
    chinese = noun.zh
    if np.adjective:
        adjective = ADJECTIVES[np.adjective]
        english = f"{adjective.en} {english}"
        chinese = adjective.attributive + chinese
    if not np.container:
        return english, chinese, noun.measure
    container = CONTAINERS[np.container]
    counted = container.plural if np.plural else container.en
    return f"{counted} of {english}", chinese, container.zh


_QUANTIFIERS = {"some": "一些", "many": "很多", "no": "", "how many": "几"}


def _render_common_np(np: NP, negated: bool) -> tuple[str, str, Agreement]:
    english, chinese, measure = _render_core(np, NOUNS[np.head])
    agreement: Agreement = "plural" if np.plural else "3sg"
    det = np.det
    if det in ("", "the"):
        return _join(det, english), chinese, agreement
    if det == "a":
        chinese = chinese if negated and not np.container else f"一{measure}{chinese}"
        return f"{_article(english)} {english}", chinese, agreement
    if det == "some" and negated:
        return f"any {english}", chinese, agreement
    if det in NUMBERS:
        return f"{det} {english}", f"{NUMBERS[det]}{measure}{chinese}", agreement
    if det in ("this", "that"):
        near = det == "this"
        if np.plural:
            return (
                f"{'these' if near else 'those'} {english}",
                ("这些" if near else "那些") + chinese,
                agreement,
            )
        return f"{det} {english}", f"{'这' if near else '那'}{measure}{chinese}", agreement
    if det == "how many":
        return f"how many {english}", f"几{measure}{chinese}", agreement
    if det in _QUANTIFIERS:
        return f"{det} {english}", _QUANTIFIERS[det] + chinese, agreement
    return f"{det} {english}", POSSESSIVES[det] + chinese, agreement


def _present(forms: VerbForms, base: str, agreement: Agreement) -> str:
    return forms.third if agreement == "3sg" else base


def _render_relative_np(np: NP) -> tuple[str, str, Agreement]:
    """ "the cat that Tom saw" → "汤姆看见的猫"; "the boy who chases the cat" → "追逐猫的男孩"."""
    noun = NOUNS[np.head]
    relative = np.relative
    assert relative is not None
    verb, forms = VERBS[relative.verb], FORMS[relative.verb]
    agreement: Agreement = "plural" if np.plural else "3sg"
    if relative.subject is None:
        assert relative.obj is not None
        obj_en, obj_zh, _ = render_np(relative.obj, "object")
        verb_en = forms.past if relative.past else _present(forms, verb.base, agreement)
        clause_en, clause_zh = f"{verb_en} {obj_en}", verb.zh + obj_zh
    else:
        subject_en, subject_zh, subject_agreement = render_np(relative.subject)
        verb_en = forms.past if relative.past else _present(forms, verb.base, subject_agreement)
        clause_en, clause_zh = f"{subject_en} {verb_en}", subject_zh + verb.zh
    who = "who" if noun.cls == "person" else "that"
    head = noun.plural if np.plural else noun.en
    return f"the {head} {who} {clause_en}", f"{clause_zh}的{noun.zh}", agreement


def _english_verb_group(
    forms: VerbForms, base: str, tense: Tense, agreement: Agreement, needs_auxiliary: bool
) -> tuple[str, str]:
    """The auxiliary ("" when none) and the main verb form."""
    if tense == "present":
        if needs_auxiliary:
            return ("does" if agreement == "3sg" else "do"), base
        return "", _present(forms, base, agreement)
    if tense == "past":
        return ("did", base) if needs_auxiliary else ("", forms.past)
    if tense == "future":
        return "will", base
    if tense == "progressive":
        return _be(agreement), forms.ing
    return ("has" if agreement == "3sg" else "have"), forms.participle


def _chinese_auxiliary(verb: Verb, tense: Tense, negated: bool, has_place: bool) -> tuple[str, str]:
    """The words before the place phrase (不, 没, 会, 在 ...) and the aspect particle."""
    if tense == "present":
        return (verb.zh_negated if negated else ""), ""
    if tense == "past":
        return ("没", "") if negated else ("", "了")
    if tense == "future":
        return ("不会" if negated else "会"), ""
    if tense == "progressive":
        if negated:
            return ("没" if has_place else "没在"), ""
        return ("正" if has_place else "在"), ""
    return ("没" if negated else ""), "过"


def _render_objects(clause: Clause) -> tuple[str, str, str]:
    """The objects in English and Chinese, and a fronted "how many" phrase."""
    recipient_en = recipient_zh = ""
    if clause.recipient is not None:
        recipient_en, recipient_zh, _ = render_np(clause.recipient, "object")
    if clause.wh in ("what", "whom"):
        return recipient_en, recipient_zh + ("什么" if clause.wh == "what" else "谁"), ""
    if clause.obj is None:
        return recipient_en, recipient_zh, ""
    obj_en, obj_zh, _ = render_np(clause.obj, "object", negated=clause.negated)
    if clause.wh == "how many":
        return recipient_en, recipient_zh + obj_zh, obj_en
    return _join(recipient_en, obj_en), recipient_zh + obj_zh, ""


def _render_clause(clause: Clause) -> tuple[str, str]:
    verb, forms = VERBS[clause.verb], FORMS[clause.verb]
    if clause.subject is None:
        subject_en, subject_zh, agreement = "who", "谁", "3sg"
    else:
        subject_en, subject_zh, agreement = render_np(clause.subject)
    inverted = clause.question and clause.subject is not None
    auxiliary, main = _english_verb_group(
        forms, verb.base, clause.tense, agreement, clause.negated or inverted
    )
    objects_en, objects_zh, fronted = _render_objects(clause)
    place_en = clause.place
    place_zh = "在哪里" if clause.wh == "where" else ("在" + PLACES[place_en].zh if place_en else "")
    time_en = clause.time
    time_zh = "什么时候" if clause.wh == "when" else TIMES.get(time_en, "")
    not_ = "not" if clause.negated else ""
    tail = _join(objects_en, place_en, time_en)
    if inverted:
        wh = fronted or ("who" if clause.wh == "whom" else clause.wh)
        english = _join(wh, auxiliary, subject_en, not_, main, tail)
    else:
        english = _join(subject_en, auxiliary, not_, clause.adverb, main, tail)

    before, aspect = _chinese_auxiliary(verb, clause.tense, clause.negated, bool(place_zh))
    transitive = clause.obj is not None or clause.wh in ("what", "whom")
    verb_zh = verb.zh if transitive else verb.zh_alone
    if clause.tense == "perfect":
        verb_zh = verb.zh_experienced
    adverb_zh = ADVERBS.get(clause.adverb, "")
    chinese = subject_zh + time_zh + adverb_zh + before + place_zh + verb_zh + aspect + objects_zh
    if clause.question:
        return _sentence(english, "?"), chinese + ("？" if clause.wh else "吗？")
    return _sentence(english), chinese


# (negated, very) → the word before a predicate adjective: 很大, 非常大, 不大, 不太大
_DEGREES = {(False, False): "很", (False, True): "非常", (True, False): "不", (True, True): "不太"}


def _render_quality(quality: Quality) -> tuple[str, str]:
    subject_en, subject_zh, agreement = render_np(quality.subject)
    adjective = ADJECTIVES[quality.adjective]
    be = _be(agreement, quality.past)
    very = "very" if quality.very else ""
    time_zh = TIMES.get(quality.time, "")
    if quality.question:
        english = _sentence(_join(be, subject_en, very, adjective.en, quality.time), "?")
        degree = "非常" if quality.very else ""
        return english, f"{subject_zh}{time_zh}{degree}{adjective.zh}吗？"
    not_ = "not" if quality.negated else ""
    english = _sentence(_join(subject_en, be, not_, very, adjective.en, quality.time))
    degree = _DEGREES[quality.negated, quality.very]
    return english, f"{subject_zh}{time_zh}{degree}{adjective.zh}"


def _render_comparison(comparison: Comparison) -> tuple[str, str]:
    adjective = ADJECTIVES[comparison.adjective]
    other_en, other_zh, _ = render_np(comparison.other, "object")
    if comparison.subject is None:
        subject_en, subject_zh, agreement = "who", "谁", "3sg"
    else:
        subject_en, subject_zh, agreement = render_np(comparison.subject)
    be = _be(agreement)
    compared = f"{adjective.comparative} than {other_en}"
    marker = "没有" if comparison.negated else "比"
    chinese = f"{subject_zh}{marker}{other_zh}{adjective.zh}"
    if comparison.subject is None:
        return _sentence(_join("who", be, compared), "?"), chinese + "？"
    if comparison.question:
        return _sentence(_join(be, subject_en, compared), "?"), chinese + "吗？"
    not_ = "not" if comparison.negated else ""
    return _sentence(_join(subject_en, be, not_, compared)), chinese


def _render_identity(identity: Identity) -> tuple[str, str]:
    subject_en, subject_zh, agreement = render_np(identity.subject)
    noun_en, _, _ = render_np(identity.noun, "object")
    # "Tom is a teacher" → "汤姆是老师": no 一个 after 是
    bare = identity.noun._replace(det="") if identity.noun.det == "a" else identity.noun
    noun_zh = render_np(bare, "object")[1]
    be = _be(agreement)
    if identity.question:
        return _sentence(_join(be, subject_en, noun_en), "?"), f"{subject_zh}是{noun_zh}吗？"
    copula = "不是" if identity.negated else "是"
    not_ = "not" if identity.negated else ""
    return _sentence(_join(subject_en, be, not_, noun_en)), subject_zh + copula + noun_zh


def _render_existence(existence: Existence) -> tuple[str, str]:
    thing_en, thing_zh, agreement = render_np(existence.thing, "object")
    be = _be(agreement, existence.past)
    place = PLACES[existence.place]
    where_zh = TIMES.get(existence.time, "") + place.zh
    tail = _join(existence.place, existence.time)
    if existence.thing.det == "how many":
        english = _sentence(_join(thing_en, be, "there", tail), "?")
        return english, f"{where_zh}有{thing_zh}？"
    if existence.question:
        english = _sentence(_join(be, "there", thing_en, tail), "?")
        return english, f"{where_zh}有{thing_zh}吗？"
    verb_zh = "没有" if existence.thing.det == "no" else "有"
    return _sentence(_join("there", be, thing_en, tail)), where_zh + verb_zh + thing_zh


def _sentence(words: str, end: str = "") -> str:
    return words[0].upper() + words[1:] + end


_RENDERERS = {
    Clause: _render_clause,
    Quality: _render_quality,
    Comparison: _render_comparison,
    Identity: _render_identity,
    Existence: _render_existence,
}


def render(sentence: Sentence) -> tuple[str, str]:
    """The (english, chinese) pair of a sentence structure.

    >>> render(Clause(NP("Tom"), "chase", NP("Jerry")))
    ('Tom chases Jerry', '汤姆追逐杰瑞')
    >>> render(Clause(NP("Tom"), "eat", NP("rice"), tense="past", time="yesterday"))
    ('Tom ate rice yesterday', '汤姆昨天吃了米饭')
    """
    return _RENDERERS[type(sentence)](sentence)
