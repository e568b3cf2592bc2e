"""The verbs, with their Chinese forms and English inflections, and the frequency adverbs."""

from __future__ import annotations

from typing import NamedTuple


class Verb(NamedTuple):
    base: str
    zh: str
    objects: frozenset[str]  # noun tags it takes as object; empty: intransitive only
    zh_alone: str  # Chinese without an object ("吃" → "吃饭"); "": needs an object
    agents: frozenset[str]  # noun classes that can be the subject
    kind: str  # "action"; "event": no progressive; "state": simple present only
    zh_experienced: str  # the verb before 过
    zh_negated: str  # present-tense negation: 不, but 没 for 有
    ditransitive: bool


class VerbForms(NamedTuple):
    third: str
    past: str
    participle: str
    ing: str


def _verb(
    base: str,
    zh: str,
    objects: str = "",
    *,
    alone: str = "",
    agents: str = "person",
    kind: str = "action",
    experienced: str = "",
    negated: str = "不",
    ditransitive: bool = False,
) -> Verb:
    return Verb(
        base=base,
        zh=zh,
        objects=frozenset(objects.split()),
        zh_alone=alone,
        agents=frozenset(agents.split()),
        kind=kind,
        zh_experienced=experienced or zh or alone,
        zh_negated=negated,
        ditransitive=ditransitive,
    )


_BOTH = "person animal"
VERB_LIST: tuple[Verb, ...] = (
    _verb("chase", "追逐", "animal person", agents=_BOTH),
    _verb(
        "see", "看见", "animal person vehicle thing furniture", agents=_BOTH, kind="event", experienced="看"
    ),
    _verb("watch", "看", "watch animal"),
    _verb("eat", "吃", "food", alone="吃饭", agents=_BOTH),
    _verb("drink", "喝", "drink", agents=_BOTH),
    _verb("read", "看", "read", alone="看书"),
    _verb("write", "写", "write"),
    _verb("buy", "买", "thing furniture food drink read vehicle animal"),
    _verb("like", "喜欢", "animal person food drink read media subject", agents=_BOTH, kind="state"),
    _verb("love", "爱", "person animal", kind="state"),
    _verb("want", "想要", "thing furniture food drink vehicle animal", kind="state"),
    _verb("have", "有", "thing furniture animal vehicle read", kind="state", negated="没"),
    _verb("know", "认识", "person", kind="state"),
    _verb("help", "帮助", "person"),
    _verb("meet", "遇见", "person", kind="event"),
    _verb("visit", "拜访", "person"),
    _verb("wash", "洗", "wash"),
    _verb("clean", "打扫", "room"),
    _verb("draw", "画", "animal draw", alone="画画"),
    _verb("find", "找到", "thing animal person read", kind="event"),
    _verb("lose", "丢", "thing", kind="event"),
    _verb("open", "打开", "open"),
    _verb("close", "关上", "open"),
    _verb("cook", "做", "cook", alone="做饭"),
    _verb("make", "做", "make"),
    _verb("drive", "开", "drive"),
    _verb("ride", "骑", "ride"),
    _verb("fix", "修", "fix"),
    _verb("feed", "喂", "animal"),
    _verb("catch", "抓", "animal", agents=_BOTH),
    _verb("throw", "扔", "throw"),
    _verb("borrow", "借", "borrow"),
    _verb("send", "寄", "send"),
    _verb("plant", "种", "plant"),
    _verb("climb", "爬", "climb"),
    _verb("sing", "唱", "sing", alone="唱歌"),
    _verb("play", "玩", "play", alone="玩", agents=_BOTH),
    _verb("study", "学习", "subject", alone="学习"),
    _verb("speak", "说", "language"),
    _verb("give", "给", "thing food read", ditransitive=True),
    _verb("sleep", "", alone="睡觉", agents=_BOTH),
    _verb("swim", "", alone="游泳", agents=_BOTH),
    _verb("run", "", alone="跑步", agents=_BOTH),
    _verb("dance", "", alone="跳舞"),
    _verb("work", "", alone="工作"),
    _verb("cry", "", alone="哭"),
    _verb("laugh", "", alone="笑"),
)
VERBS = {verb.base: verb for verb in VERB_LIST}

# past, participle
_IRREGULAR_VERBS = {
    "see": ("saw", "seen"),
    "eat": ("ate", "eaten"),
    "drink": ("drank", "drunk"),
    "read": ("read", "read"),
    "write": ("wrote", "written"),
    "buy": ("bought", "bought"),
    "have": ("had", "had"),
    "know": ("knew", "known"),
    "meet": ("met", "met"),
    "draw": ("drew", "drawn"),
    "find": ("found", "found"),
    "lose": ("lost", "lost"),
    "make": ("made", "made"),
    "drive": ("drove", "driven"),
    "ride": ("rode", "ridden"),
    "feed": ("fed", "fed"),
    "catch": ("caught", "caught"),
    "throw": ("threw", "thrown"),
    "send": ("sent", "sent"),
    "sing": ("sang", "sung"),
    "speak": ("spoke", "spoken"),
    "give": ("gave", "given"),
    "sleep": ("slept", "slept"),
    "swim": ("swam", "swum"),
    "run": ("ran", "run"),
}
_DOUBLED_FINAL = frozenset({"swim", "run"})  # swimming, running


def _english_forms(base: str) -> VerbForms:
    """Third person singular, past, past participle and -ing form of a verb."""
    consonant_y = base.endswith("y") and base[-2] not in "aeiou"
    if base == "have":
        third = "has"
    elif base.endswith(("s", "x", "z", "ch", "sh", "o")):
        third = base + "es"
    else:
        third = base[:-1] + "ies" if consonant_y else base + "s"
    if base in _IRREGULAR_VERBS:
        past, participle = _IRREGULAR_VERBS[base]
    else:
        regular = base + "d" if base.endswith("e") else base + "ed"
        past = participle = base[:-1] + "ied" if consonant_y else regular
    if base in _DOUBLED_FINAL:
        ing = base + base[-1] + "ing"
    elif base.endswith("e") and not base.endswith("ee"):
        ing = base[:-1] + "ing"
    else:
        ing = base + "ing"
    return VerbForms(third, past, participle, ing)


FORMS = {verb.base: _english_forms(verb.base) for verb in VERB_LIST}

ADVERBS = {"often": "经常", "usually": "通常", "sometimes": "有时候", "always": "总是"}
ADVERB_LIST = tuple(ADVERBS)
