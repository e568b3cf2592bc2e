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

Public API: :class:`ParallelCorpus`, :func:`generate_pairs` and
:func:`default_corpus`. The sentence structures (:class:`NP`, :class:`Clause`
...) and :func:`render` are exposed so that tests and examples can translate a
hand-built sentence, e.g.
``render(Clause(NP("Tom"), "chase", NP("Jerry")))`` gives
``("Tom chases Jerry", "汤姆追逐杰瑞")``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, TypeVar

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

T = TypeVar("T")
Tense = Literal["present", "past", "future", "progressive", "perfect"]
Agreement = Literal["1sg", "3sg", "plural"]

# ----------------------------------------------------------------------------
# Lexicon
# ----------------------------------------------------------------------------


class Noun(NamedTuple):
    en: str
    plural: str  # equal to ``en`` for mass nouns
    zh: str
    measure: str  # "" for mass nouns
    cls: str  # semantic class: which adjectives apply, who can act
    tags: frozenset[str]  # the class plus what can be done to it (verb object tags)
    containers: tuple[str, ...]  # "cup" for "a cup of tea", "bag" for "a bag of apples"


class Container(NamedTuple):
    en: str
    plural: str
    zh: str  # the measure word: 杯, 瓶, 碗 ...


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


class Adjective(NamedTuple):
    en: str
    zh: str  # predicate form: 猫很大, 花很漂亮
    attributive: str  # before a noun: 大狗, 漂亮的花; "": not used before nouns
    comparative: str  # "": not compared
    predicate: bool  # usable after "is"
    applies_to: tuple[str, ...]  # noun classes


class Pronoun(NamedTuple):
    subject: str
    object: str
    possessive: str
    zh: str
    agreement: Agreement


class Place(NamedTuple):
    en: str
    zh: str  # locative: 图书馆, 花园里, 桌子上; activities add 在 before it
    activity: bool  # "Tom reads in the library"
    holds: tuple[str, ...]  # noun classes for "There is a cat in the garden"


class Time(NamedTuple):
    en: str
    zh: str
    tense: str  # the tense it goes with: "present" (habitual), "past", "future" ...


_NAMES: dict[str, str] = {
    "Tom": "汤姆",
    "Jerry": "杰瑞",
    "Mary": "玛丽",
    "John": "约翰",
    "Lucy": "露西",
    "Jack": "杰克",
    "Lily": "莉莉",
    "Mike": "迈克",
    "Anna": "安娜",
    "David": "大卫",
    "Emma": "艾玛",
    "Peter": "彼得",
}

_PRONOUN_LIST = (
    Pronoun("I", "me", "my", "我", "1sg"),
    Pronoun("you", "you", "your", "你", "plural"),
    Pronoun("he", "him", "his", "他", "3sg"),
    Pronoun("she", "her", "her", "她", "3sg"),
    Pronoun("it", "it", "its", "它", "3sg"),
    Pronoun("we", "us", "our", "我们", "plural"),
    Pronoun("they", "them", "their", "他们", "plural"),
)
_PRONOUNS = {p.subject: p for p in _PRONOUN_LIST}
_PERSON_PRONOUNS = tuple(p.subject for p in _PRONOUN_LIST if p.subject != "it")
_POSSESSIVES: dict[str, str] = {p.possessive: p.zh + "的" for p in _PRONOUN_LIST}
_POSSESSIVES.update({f"{name}'s": zh + "的" for name, zh in _NAMES.items()})
_PERSON_POSSESSIVES = tuple(p.possessive for p in _PRONOUN_LIST if p.subject != "it")

_CONTAINERS = {
    c.en: c
    for c in (
        Container("cup", "cups", "杯"),
        Container("bottle", "bottles", "瓶"),
        Container("bowl", "bowls", "碗"),
        Container("piece", "pieces", "块"),
        Container("box", "boxes", "盒"),
        Container("bag", "bags", "袋"),
    )
}

# english, chinese, measure word ("" for mass nouns), tags (the first one is the
# class), containers, irregular plural
_NOUN_TABLE: tuple[tuple[str, ...], ...] = (
    ("cat", "猫", "只", "animal"),
    ("dog", "狗", "只", "animal wash"),
    ("mouse", "老鼠", "只", "animal", "", "mice"),
    ("bird", "鸟", "只", "animal"),
    ("rabbit", "兔子", "只", "animal"),
    ("tiger", "老虎", "只", "animal"),
    ("monkey", "猴子", "只", "animal"),
    ("duck", "鸭子", "只", "animal"),
    ("panda", "熊猫", "只", "animal"),
    ("horse", "马", "匹", "animal ride"),
    ("cow", "牛", "头", "animal"),
    ("elephant", "大象", "头", "animal"),
    ("snake", "蛇", "条", "animal"),
    ("wolf", "狼", "只", "animal", "", "wolves"),
    ("boy", "男孩", "个", "person"),
    ("girl", "女孩", "个", "person"),
    ("man", "男人", "个", "person", "", "men"),
    ("woman", "女人", "个", "person", "", "women"),
    ("child", "孩子", "个", "person relation", "", "children"),
    ("baby", "婴儿", "个", "person relation"),
    ("teacher", "老师", "位", "person job relation"),
    ("doctor", "医生", "位", "person job relation"),
    ("student", "学生", "个", "person job relation"),
    ("driver", "司机", "个", "person job"),
    ("policeman", "警察", "个", "person job", "", "policemen"),
    ("cook", "厨师", "个", "person job"),
    ("friend", "朋友", "个", "person job relation"),
    ("neighbor", "邻居", "个", "person job relation"),
    ("apple", "苹果", "个", "food", "bag"),
    ("banana", "香蕉", "根", "food"),
    ("orange", "橙子", "个", "food", "bag"),
    ("potato", "土豆", "个", "food cook"),
    ("egg", "鸡蛋", "个", "food cook"),
    ("cake", "蛋糕", "块", "food make"),
    ("cookie", "饼干", "块", "food make", "box bag"),
    ("candy", "糖", "块", "food", "box bag"),
    ("dumpling", "饺子", "个", "food make cook"),
    ("rice", "米饭", "", "food cook", "bowl"),
    ("bread", "面包", "", "food", "piece"),
    ("meat", "肉", "", "food cook", "piece"),
    ("soup", "汤", "", "food cook", "bowl"),
    ("water", "水", "", "drink", "cup bottle"),
    ("milk", "牛奶", "", "drink", "cup bottle"),
    ("tea", "茶", "", "drink", "cup"),
    ("coffee", "咖啡", "", "drink", "cup"),
    ("juice", "果汁", "", "drink", "bottle"),
    ("book", "书", "本", "read borrow send"),
    ("newspaper", "报纸", "份", "read"),
    ("magazine", "杂志", "本", "read borrow"),
    ("letter", "信", "封", "read write send"),
    ("story", "故事", "个", "read write"),
    ("poem", "诗", "首", "read write"),
    ("map", "地图", "张", "read draw"),
    ("film", "电影", "部", "media watch"),
    ("match", "比赛", "场", "media watch"),
    ("game", "游戏", "个", "media play"),
    ("song", "歌", "首", "media sing write"),
    ("car", "汽车", "辆", "vehicle drive wash fix borrow draw"),
    ("bus", "公共汽车", "辆", "vehicle drive"),
    ("truck", "卡车", "辆", "vehicle drive wash fix"),
    ("bike", "自行车", "辆", "vehicle ride wash fix borrow"),
    ("boat", "船", "条", "vehicle draw"),
    ("plane", "飞机", "架", "vehicle draw"),
    ("table", "桌子", "张", "furniture fix"),
    ("chair", "椅子", "把", "furniture fix"),
    ("bed", "床", "张", "furniture"),
    ("pen", "笔", "支", "thing borrow throw"),
    ("pencil", "铅笔", "支", "thing borrow"),
    ("knife", "刀", "把", "thing", "", "knives"),
    ("umbrella", "伞", "把", "thing borrow"),
    ("key", "钥匙", "把", "thing throw"),
    ("cup", "杯子", "个", "thing wash"),
    ("bag", "包", "个", "thing open"),
    ("box", "盒子", "个", "thing open"),
    ("phone", "手机", "部", "thing fix"),
    ("computer", "电脑", "台", "thing fix"),
    ("camera", "相机", "台", "thing fix borrow"),
    ("shirt", "衬衫", "件", "thing wash"),
    ("dress", "裙子", "条", "thing wash"),
    ("hat", "帽子", "顶", "thing draw"),
    ("photo", "照片", "张", "thing send"),
    ("ball", "球", "个", "thing throw"),
    ("toy", "玩具", "个", "thing make throw"),
    ("gift", "礼物", "个", "thing send"),
    ("kite", "风筝", "只", "thing make"),
    ("flower", "花", "朵", "thing plant draw"),
    ("door", "门", "扇", "part open fix"),
    ("window", "窗户", "扇", "part open fix wash"),
    ("tree", "树", "棵", "nature plant climb draw"),
    ("mountain", "山", "座", "nature climb draw"),
    ("house", "房子", "座", "building draw"),
    ("bridge", "桥", "座", "building draw"),
    ("room", "房间", "间", "room clean"),
    ("kitchen", "厨房", "间", "room clean"),
    ("classroom", "教室", "间", "room clean"),
    ("math", "数学", "", "subject"),
    ("music", "音乐", "", "subject"),
    ("history", "历史", "", "subject"),
    ("English", "英语", "", "subject language"),
    ("Chinese", "中文", "", "subject language"),
)


def _plural(word: str) -> str:
    """The regular English plural: cats, boxes, babies, tomatoes, toys."""
    if word.endswith(("s", "x", "z", "ch", "sh")) or word in ("tomato", "potato"):
        return word + "es"
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _make_noun(row: tuple[str, ...]) -> Noun:
    en, zh, measure, tags, containers, plural = (*row, "", "")[:6]
    if not measure:
        plural = en
    return Noun(
        en=en,
        plural=plural or _plural(en),
        zh=zh,
        measure=measure,
        cls=tags.split()[0],
        tags=frozenset(tags.split()),
        containers=tuple(containers.split()),
    )


_NOUNS = {noun.en: noun for noun in map(_make_noun, _NOUN_TABLE)}


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
_VERB_LIST: tuple[Verb, ...] = (
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
_VERBS = {verb.base: verb for verb in _VERB_LIST}

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


_FORMS = {verb.base: _english_forms(verb.base) for verb in _VERB_LIST}

_SIZE = "animal thing furniture vehicle building room"
_GOODS = "thing furniture vehicle"


def _adj(
    en: str,
    zh: str,
    attributive: str,
    comparative: str,
    applies_to: str,
    *,
    predicate: bool = True,
) -> Adjective:
    return Adjective(en, zh, attributive, comparative, predicate, tuple(applies_to.split()))


_ADJECTIVE_LIST: tuple[Adjective, ...] = (
    _adj("big", "大", "大", "bigger", _SIZE),
    _adj("small", "小", "小", "smaller", _SIZE),
    _adj("red", "红", "红", "", _GOODS, predicate=False),
    _adj("white", "白", "白", "", "animal " + _GOODS, predicate=False),
    _adj("black", "黑", "黑", "", "animal " + _GOODS, predicate=False),
    _adj("new", "新", "新", "newer", _GOODS + " read building part"),
    _adj("old", "旧", "旧", "older", _GOODS + " read building"),
    _adj("expensive", "贵", "贵的", "more expensive", _GOODS),
    _adj("cheap", "便宜", "便宜的", "cheaper", _GOODS),
    _adj("clean", "干净", "干净的", "cleaner", _GOODS + " room part"),
    _adj("dirty", "脏", "脏", "dirtier", _GOODS + " room animal"),
    _adj("beautiful", "漂亮", "漂亮的", "more beautiful", "person thing building room nature"),
    _adj("cute", "可爱", "可爱的", "cuter", "animal"),
    _adj("fast", "快", "", "faster", "animal vehicle"),
    _adj("hungry", "饿", "", "hungrier", "animal person"),
    _adj("smart", "聪明", "聪明的", "smarter", "animal person"),
    _adj("young", "年轻", "年轻的", "younger", "person"),
    _adj("tall", "高", "", "taller", "person"),
    _adj("happy", "高兴", "", "happier", "person"),
    _adj("tired", "累", "", "more tired", "person"),
    _adj("busy", "忙", "", "busier", "person"),
    _adj("interesting", "有趣", "有趣的", "more interesting", "read media subject"),
    _adj("delicious", "好吃", "好吃的", "more delicious", "food"),
    _adj("hot", "热", "热", "hotter", "drink"),
    _adj("cold", "冷", "冷", "colder", "drink"),
)
_ADJECTIVES = {adj.en: adj for adj in _ADJECTIVE_LIST}

_OUTDOORS = "animal person thing"
_INDOORS = "person thing furniture food read"
_ON_FURNITURE = "animal thing food read"


def _place(en: str, zh: str, activity: bool, holds: str = "") -> Place:
    return Place(en, zh, activity, tuple(holds.split()))


_PLACE_LIST: tuple[Place, ...] = (
    _place("in the library", "图书馆", True),
    _place("in the park", "公园里", True, _OUTDOORS),
    _place("at school", "学校", True),
    _place("at home", "家", True),
    _place("in the kitchen", "厨房里", True, _INDOORS),
    _place("in the garden", "花园里", True, _OUTDOORS),
    _place("in the classroom", "教室里", True, _INDOORS),
    _place("at the restaurant", "饭馆", True),
    _place("at the hospital", "医院", True),
    _place("at the supermarket", "超市", True),
    _place("at the station", "车站", True),
    _place("at the zoo", "动物园里", True, "animal person"),
    _place("at the cinema", "电影院", True),
    _place("on the beach", "海边", True),
    _place("on the farm", "农场里", True, "animal person"),
    _place("in the street", "街上", True, "animal person"),
    _place("in the river", "河里", False, "animal"),
    _place("in the room", "房间里", False, _INDOORS),
    _place("in the box", "盒子里", False, "food thing"),
    _place("in the bag", "包里", False, "food thing read"),
    _place("on the table", "桌子上", False, _ON_FURNITURE),
    _place("under the table", "桌子下", False, _ON_FURNITURE),
    _place("on the bed", "床上", False, _ON_FURNITURE),
    _place("under the bed", "床下", False, _ON_FURNITURE),
    _place("in the tree", "树上", False, "animal"),
)
_PLACES = {place.en: place for place in _PLACE_LIST}
_ACTIVITY_PLACES = tuple(p.en for p in _PLACE_LIST if p.activity)

_NUMBERS: dict[str, str] = {
    "one": "一",
    "two": "两",
    "three": "三",
    "four": "四",
    "five": "五",
    "six": "六",
    "seven": "七",
    "eight": "八",
    "nine": "九",
    "ten": "十",
}
_MANY = tuple(_NUMBERS)[1:]  # two .. ten

_ADVERBS = {"often": "经常", "usually": "通常", "sometimes": "有时候", "always": "总是"}
_ADVERB_LIST = tuple(_ADVERBS)

_WEEKDAYS = {
    "Monday": "星期一",
    "Tuesday": "星期二",
    "Wednesday": "星期三",
    "Thursday": "星期四",
    "Friday": "星期五",
    "Saturday": "星期六",
    "Sunday": "星期天",
}


def _time_list() -> tuple[Time, ...]:
    """Time phrases, each tied to the tense it goes with."""
    times = [
        Time("every day", "每天", "present"),
        Time("every morning", "每天早上", "present"),
        Time("every evening", "每天晚上", "present"),
        Time("every year", "每年", "present"),
        Time("yesterday", "昨天", "past"),
        Time("yesterday morning", "昨天早上", "past"),
        Time("last night", "昨天晚上", "past"),
        Time("last year", "去年", "past"),
        Time("tomorrow", "明天", "future"),
        Time("tomorrow morning", "明天早上", "future"),
        Time("tonight", "今天晚上", "future"),
        Time("next year", "明年", "future"),
        Time("now", "现在", "progressive"),
        Time("before", "以前", "perfect"),
        Time("today", "今天", "quality"),
        Time("now", "现在", "quality"),
    ]
    units = {"week": "星期", "month": "月", "weekend": "周末", **_WEEKDAYS}
    for en, zh in units.items():
        times.append(Time(f"every {en}", f"每个{zh}", "present"))
        times.append(Time(f"last {en}", f"上个{zh}", "past"))
        times.append(Time(f"next {en}", f"下个{zh}", "future"))
    for number in _MANY:
        zh = _NUMBERS[number]
        times.append(Time(f"{number} days ago", f"{zh}天前", "past"))
        times.append(Time(f"{number} years ago", f"{zh}年前", "past"))
        times.append(Time(f"in {number} days", f"{zh}天后", "future"))
    return tuple(times)


_TIME_LIST = _time_list()
_TIMES_BY_TENSE: dict[str, tuple[str, ...]] = {}
for _time in _TIME_LIST:
    _TIMES_BY_TENSE[_time.tense] = (*_TIMES_BY_TENSE.get(_time.tense, ()), _time.en)
_TIMES = {time.en: time.zh for time in _TIME_LIST}

# ----------------------------------------------------------------------------
# Sentence structures
# ----------------------------------------------------------------------------


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

# ----------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------


def _join(*words: str) -> str:
    return " ".join(filter(None, words))


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _be(agreement: Agreement, past: bool = False) -> str:
    if past:
        return "was" if agreement != "plural" else "were"
    return {"1sg": "am", "3sg": "is", "plural": "are"}[agreement]


def _render_np(np: NP, case: str = "subject", negated: bool = False) -> tuple[str, str, Agreement]:
    """English, Chinese and verb agreement of a noun phrase.

    Under negation "a" loses its 一 + measure word ("没有猫") and "some" becomes
    "any" ("did not eat any rice" → "没吃米饭").
    """
    pronoun = _PRONOUNS.get(np.head)
    if pronoun is not None:
        english = pronoun.subject if case == "subject" else pronoun.object
        return english, pronoun.zh, pronoun.agreement
    name = _NAMES.get(np.head)
    if name is not None:
        if np.conjunct:
            return f"{np.head} and {np.conjunct}", f"{name}和{_NAMES[np.conjunct]}", "plural"
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
        adjective = _ADJECTIVES[np.adjective]
        english = f"{adjective.en} {english}"
        chinese = adjective.attributive + chinese
    if not np.container:
        return english, chinese, noun.measure
    container = _CONTAINERS[np.container]
    counted = container.plural if np.plural else container.en
    return f"{counted} of {english}", chinese, container.zh


_QUANTIFIERS = {"some": "一些", "many": "很多", "no": "", "how many": "几"}


def _render_common_np(np: NP, negated: bool) -> tuple[str, str, Agreement]:
    english, chinese, measure = _render_core(np, _NOUNS[np.head])
    agreement: Agreement = "plural" if np.plural else "3sg"
    det = np.det
    if det in ("", "the"):
        return _join(det, english), chinese, agreement
    if det == "a":
        chinese = chinese if negated and not np.container else f"一{measure}{chinese}"
        return f"{_article(english)} {english}", chinese, agreement
    if det == "some" and negated:
        return f"any {english}", chinese, agreement
    if det in _NUMBERS:
        return f"{det} {english}", f"{_NUMBERS[det]}{measure}{chinese}", agreement
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
    return f"{det} {english}", _POSSESSIVES[det] + chinese, agreement


def _present(forms: VerbForms, base: str, agreement: Agreement) -> str:
    return forms.third if agreement == "3sg" else base


def _render_relative_np(np: NP) -> tuple[str, str, Agreement]:
    """ "the cat that Tom saw" → "汤姆看见的猫"; "the boy who chases the cat" → "追逐猫的男孩"."""
    noun = _NOUNS[np.head]
    relative = np.relative
    assert relative is not None
    verb, forms = _VERBS[relative.verb], _FORMS[relative.verb]
    agreement: Agreement = "plural" if np.plural else "3sg"
    if relative.subject is None:
        assert relative.obj is not None
        obj_en, obj_zh, _ = _render_np(relative.obj, "object")
        verb_en = forms.past if relative.past else _present(forms, verb.base, agreement)
        clause_en, clause_zh = f"{verb_en} {obj_en}", verb.zh + obj_zh
    else:
        subject_en, subject_zh, subject_agreement = _render_np(relative.subject)
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
        recipient_en, recipient_zh, _ = _render_np(clause.recipient, "object")
    if clause.wh in ("what", "whom"):
        return recipient_en, recipient_zh + ("什么" if clause.wh == "what" else "谁"), ""
    if clause.obj is None:
        return recipient_en, recipient_zh, ""
    obj_en, obj_zh, _ = _render_np(clause.obj, "object", negated=clause.negated)
    if clause.wh == "how many":
        return recipient_en, recipient_zh + obj_zh, obj_en
    return _join(recipient_en, obj_en), recipient_zh + obj_zh, ""


def _render_clause(clause: Clause) -> tuple[str, str]:
    verb, forms = _VERBS[clause.verb], _FORMS[clause.verb]
    if clause.subject is None:
        subject_en, subject_zh, agreement = "who", "谁", "3sg"
    else:
        subject_en, subject_zh, agreement = _render_np(clause.subject)
    inverted = clause.question and clause.subject is not None
    auxiliary, main = _english_verb_group(
        forms, verb.base, clause.tense, agreement, clause.negated or inverted
    )
    objects_en, objects_zh, fronted = _render_objects(clause)
    place_en = clause.place
    place_zh = "在哪里" if clause.wh == "where" else ("在" + _PLACES[place_en].zh if place_en else "")
    time_en = clause.time
    time_zh = "什么时候" if clause.wh == "when" else _TIMES.get(time_en, "")
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
    adverb_zh = _ADVERBS.get(clause.adverb, "")
    chinese = subject_zh + time_zh + adverb_zh + before + place_zh + verb_zh + aspect + objects_zh
    if clause.question:
        return _sentence(english, "?"), chinese + ("？" if clause.wh else "吗？")
    return _sentence(english), chinese


# (negated, very) → the word before a predicate adjective: 很大, 非常大, 不大, 不太大
_DEGREES = {(False, False): "很", (False, True): "非常", (True, False): "不", (True, True): "不太"}


def _render_quality(quality: Quality) -> tuple[str, str]:
    subject_en, subject_zh, agreement = _render_np(quality.subject)
    adjective = _ADJECTIVES[quality.adjective]
    be = _be(agreement, quality.past)
    very = "very" if quality.very else ""
    time_zh = _TIMES.get(quality.time, "")
    if quality.question:
        english = _sentence(_join(be, subject_en, very, adjective.en, quality.time), "?")
        degree = "非常" if quality.very else ""
        return english, f"{subject_zh}{time_zh}{degree}{adjective.zh}吗？"
    not_ = "not" if quality.negated else ""
    english = _sentence(_join(subject_en, be, not_, very, adjective.en, quality.time))
    degree = _DEGREES[quality.negated, quality.very]
    return english, f"{subject_zh}{time_zh}{degree}{adjective.zh}"


def _render_comparison(comparison: Comparison) -> tuple[str, str]:
    adjective = _ADJECTIVES[comparison.adjective]
    other_en, other_zh, _ = _render_np(comparison.other, "object")
    if comparison.subject is None:
        subject_en, subject_zh, agreement = "who", "谁", "3sg"
    else:
        subject_en, subject_zh, agreement = _render_np(comparison.subject)
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
    subject_en, subject_zh, agreement = _render_np(identity.subject)
    noun_en, _, _ = _render_np(identity.noun, "object")
    # "Tom is a teacher" → "汤姆是老师": no 一个 after 是
    bare = identity.noun._replace(det="") if identity.noun.det == "a" else identity.noun
    noun_zh = _render_np(bare, "object")[1]
    be = _be(agreement)
    if identity.question:
        return _sentence(_join(be, subject_en, noun_en), "?"), f"{subject_zh}是{noun_zh}吗？"
    copula = "不是" if identity.negated else "是"
    not_ = "not" if identity.negated else ""
    return _sentence(_join(subject_en, be, not_, noun_en)), subject_zh + copula + noun_zh


def _render_existence(existence: Existence) -> tuple[str, str]:
    thing_en, thing_zh, agreement = _render_np(existence.thing, "object")
    be = _be(agreement, existence.past)
    place = _PLACES[existence.place]
    where_zh = _TIMES.get(existence.time, "") + place.zh
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


# ----------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------


def _nouns_where(keep: Callable[[Noun], bool]) -> tuple[Noun, ...]:
    return tuple(noun for noun in _NOUNS.values() if keep(noun))


_NOUNS_BY_CLASS = {
    cls: _nouns_where(lambda noun, cls=cls: noun.cls == cls) for cls in {noun.cls for noun in _NOUNS.values()}
}
_OBJECTS_OF = {
    verb.base: _nouns_where(lambda noun, verb=verb: bool(noun.tags & verb.objects)) for verb in _VERB_LIST
}
_COUNTABLE_OBJECTS_OF = {
    base: tuple(noun for noun in nouns if noun.measure) for base, nouns in _OBJECTS_OF.items()
}
_TRANSITIVE = tuple(verb for verb in _VERB_LIST if verb.objects and not verb.ditransitive)
_VERBS_TAKING = {
    noun.en: tuple(verb for verb in _TRANSITIVE if noun.tags & verb.objects) for noun in _NOUNS.values()
}
_VERBS_DONE_BY = {cls: tuple(v for v in _TRANSITIVE if cls in v.agents) for cls in ("person", "animal")}
_ATTRIBUTIVES = {
    noun.en: tuple(a.en for a in _ADJECTIVE_LIST if a.attributive and noun.cls in a.applies_to)
    for noun in _NOUNS.values()
}
_PREDICATES = tuple(a for a in _ADJECTIVE_LIST if a.predicate)
_COMPARABLES = tuple(a for a in _ADJECTIVE_LIST if a.comparative)
_JOBS = tuple(noun.en for noun in _NOUNS.values() if "job" in noun.tags)
_EXISTENCE_PLACES = tuple(place for place in _PLACE_LIST if place.holds)
_NAME_LIST = tuple(_NAMES)
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
    return NP(_pick(rng, _PERSON_PRONOUNS))


def _sample_possessive(rng: random.Random, noun: Noun) -> str:
    """ "my", "Tom's" ...; "the" for people that nobody owns ("the farmer", not "my farmer")."""
    if noun.cls == "person" and "relation" not in noun.tags:
        return "the"
    if rng.random() < 0.6:
        return _pick(rng, _PERSON_POSSESSIVES)
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
        return NP(noun.en, _pick(rng, _MANY), True, adjective, container)
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
        return NP(noun.en, _pick(rng, _MANY), True, adjective)
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


def _sample_clause(rng: random.Random, form: str) -> Clause:
    """A clause; ``form`` is "statement", "yes/no" or "wh"."""
    verb = _pick(rng, _VERB_LIST)
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
        adverb = _pick(rng, _ADVERB_LIST) if rng.random() < 0.2 else ""
    if not ends_in_relative:
        if verb.kind != "state" and clause.wh != "where" and rng.random() < 0.3:
            place = _pick(rng, _ACTIVITY_PLACES)
        chance = {"present": 0.25, "past": 0.5, "future": 0.5}.get(tense, 0.15)
        if verb.kind == "state" or adverb or clause.wh == "when":
            chance = 0.0
        if _needs_time(clause) or rng.random() < chance:
            time = _pick(rng, _TIMES_BY_TENSE[tense])
    return clause._replace(adverb=adverb, place=place, time=time)


def _needs_time(clause: Clause) -> bool:
    """Whether the clause would read like the present without a time phrase.

    "They read books" is present; "They read books yesterday" is the past.
    """
    forms = _FORMS[clause.verb]
    if clause.tense != "past" or clause.negated or clause.question or forms.past != clause.verb:
        return False
    return clause.subject is not None and _render_np(clause.subject)[2] != "3sg"


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


def _sample_quality(rng: random.Random) -> Quality:
    adjective = _pick(rng, _PREDICATES)
    subject = _sample_subject_of_class(rng, _pick(rng, adjective.applies_to))
    question = rng.random() < 0.25
    negated = not question and rng.random() < 0.3
    past = rng.random() < 0.3
    if past:
        time = _pick(rng, _TIMES_BY_TENSE["past"]) if rng.random() < 0.5 else ""
    else:
        time = _pick(rng, _TIMES_BY_TENSE["quality"]) if rng.random() < 0.2 else ""
    very = rng.random() < 0.2
    return Quality(subject, adjective.en, negated, question, very, past, time)


def _sample_comparison(rng: random.Random) -> Comparison:
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


def _sample_identity(rng: random.Random) -> Identity:
    subject = _sample_name_or_pronoun(rng, subject=True)
    plural = _render_np(subject)[2] == "plural" and subject.head != "you"
    job = _NOUNS[_pick(rng, _JOBS)]
    det = "a" if not plural else ""
    if "relation" in job.tags and rng.random() < 0.5:
        det = _sample_possessive(rng, job)
        pronoun = _PRONOUNS.get(subject.head)
        if det == f"{subject.head}'s" or (pronoun is not None and pronoun.possessive == det):
            det = "a" if not plural else ""
    question = rng.random() < 0.25
    negated = not question and rng.random() < 0.3
    return Identity(subject, NP(job.en, det, plural), negated, question)


def _sample_existence(rng: random.Random) -> Existence:
    place = _pick(rng, _EXISTENCE_PLACES)
    noun = _pick(rng, _NOUNS_BY_CLASS[_pick(rng, place.holds)])
    past = rng.random() < 0.25
    time = _pick(rng, _TIMES_BY_TENSE["past"]) if past and rng.random() < 0.6 else ""
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
    det = _pick(rng, ("a", "a", "some", "many", *_MANY))
    thing = NP(noun.en, det, det != "a", adjective)
    return Existence(thing, place.en, past, r > 0.8, time)


_SENTENCE_KINDS = (
    (0.38, lambda rng: _sample_clause(rng, "statement")),
    (0.12, lambda rng: _sample_clause(rng, "yes/no")),
    (0.17, lambda rng: _sample_clause(rng, "wh")),
    (0.09, _sample_quality),
    (0.08, _sample_comparison),
    (0.06, _sample_identity),
    (0.10, _sample_existence),
)


def _sample_sentence(rng: random.Random) -> Sentence:
    x = rng.random()
    for weight, sample in _SENTENCE_KINDS:
        x -= weight
        if x < 0:
            return sample(rng)
    return _sample_existence(rng)


# ----------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ParallelCorpus:
    """Train, validation and test pairs (english, chinese); no English sentence is shared."""

    train: list[tuple[str, str]]
    valid: list[tuple[str, str]]
    test: list[tuple[str, str]]


def _check_size(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")


def generate_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """n distinct (english, chinese) pairs, deterministic for the seed.

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
        known = pairs.setdefault(english, chinese)
        if known != chinese:
            raise RuntimeError(f"grammar bug: {english!r} translates to {known!r} and {chinese!r}")
    if len(pairs) < n:
        raise ConfigError(
            f"the built-in grammar produced only {len(pairs)} distinct sentences "
            f"in {max_draws} draws; ask for fewer than {n}"
        )
    return list(pairs.items())


def default_corpus(
    seed: int = 0, n_train: int = 60_000, n_valid: int = 500, n_test: int = 1_000
) -> ParallelCorpus:
    """Deterministic splits with no English sentence shared between any two splits.

    The test split is drawn first and the validation split next, so both stay
    the same when only ``n_train`` changes.
    """
    for name, size in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test)):
        _check_size(name, size)
    pairs = generate_pairs(n_test + n_valid + n_train, seed)
    return ParallelCorpus(
        train=pairs[n_test + n_valid :],
        valid=pairs[n_test : n_test + n_valid],
        test=pairs[:n_test],
    )
