"""The nominal lexicon: names, pronouns, nouns with their measure words, and numbers.

Every count noun carries its Chinese classifier (只, 本, 辆 ...), which is
used after numbers and demonstratives; mass nouns have none and are counted
with a container ("a cup of tea" → "一杯茶").
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Agreement = Literal["1sg", "3sg", "plural"]


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


class Pronoun(NamedTuple):
    subject: str
    object: str
    possessive: str
    zh: str
    agreement: Agreement


NAMES: dict[str, str] = {
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
PRONOUNS = {p.subject: p for p in _PRONOUN_LIST}
PERSON_PRONOUNS = tuple(p.subject for p in _PRONOUN_LIST if p.subject != "it")
POSSESSIVES: dict[str, str] = {p.possessive: p.zh + "的" for p in _PRONOUN_LIST}
POSSESSIVES.update({f"{name}'s": zh + "的" for name, zh in NAMES.items()})
PERSON_POSSESSIVES = tuple(p.possessive for p in _PRONOUN_LIST if p.subject != "it")

CONTAINERS = {
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


NOUNS = {noun.en: noun for noun in map(_make_noun, _NOUN_TABLE)}

NUMBERS: dict[str, str] = {
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
MANY = tuple(NUMBERS)[1:]  # two .. ten
