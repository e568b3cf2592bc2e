"""Adjectives, place phrases and time phrases, with the noun classes and tenses they fit."""

from __future__ import annotations

from typing import NamedTuple

from vaswani.data.grammar.nouns import MANY, NUMBERS


class Adjective(NamedTuple):
    en: str
    zh: str  # predicate form: 猫很大, 花很漂亮
    attributive: str  # before a noun: 大狗, 漂亮的花; "": not used before nouns
    comparative: str  # "": not compared
    predicate: bool  # usable after "is"
    applies_to: tuple[str, ...]  # noun classes


class Place(NamedTuple):
    en: str
    zh: str  # locative: 图书馆, 花园里, 桌子上; activities add 在 before it
    activity: bool  # "Tom reads in the library"
    holds: tuple[str, ...]  # noun classes for "There is a cat in the garden"


class Time(NamedTuple):
    en: str
    zh: str
    tense: str  # the tense it goes with: "present" (habitual), "past", "future" ...


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


ADJECTIVE_LIST: tuple[Adjective, ...] = (
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
ADJECTIVES = {adj.en: adj for adj in ADJECTIVE_LIST}

_OUTDOORS = "animal person thing"
_INDOORS = "person thing furniture food read"
_ON_FURNITURE = "animal thing food read"


def _place(en: str, zh: str, activity: bool, holds: str = "") -> Place:
    return Place(en, zh, activity, tuple(holds.split()))


PLACE_LIST: tuple[Place, ...] = (
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
PLACES = {place.en: place for place in PLACE_LIST}
ACTIVITY_PLACES = tuple(p.en for p in PLACE_LIST if p.activity)

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
    for number in MANY:
        zh = NUMBERS[number]
        times.append(Time(f"{number} days ago", f"{zh}天前", "past"))
        times.append(Time(f"{number} years ago", f"{zh}年前", "past"))
        times.append(Time(f"in {number} days", f"{zh}天后", "future"))
    return tuple(times)


_TIME_LIST = _time_list()
TIMES_BY_TENSE: dict[str, tuple[str, ...]] = {}
for _time in _TIME_LIST:
    TIMES_BY_TENSE[_time.tense] = (*TIMES_BY_TENSE.get(_time.tense, ()), _time.en)
TIMES = {time.en: time.zh for time in _TIME_LIST}
