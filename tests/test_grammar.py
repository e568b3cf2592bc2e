"""Tests of the embedded English→Chinese corpus (vaswani.data.grammar)."""

from __future__ import annotations

import itertools
import re

import pytest

from vaswani.data import grammar
from vaswani.data.grammar import (
    MAX_PAIRS,
    NP,
    Clause,
    Comparison,
    Existence,
    Identity,
    ParallelCorpus,
    Quality,
    Relative,
    default_corpus,
    generate_pairs,
    render,
)

NAMES = "(Tom|Jerry|Mary|John|Lucy|Jack|Lily|Mike|Anna|David|Emma|Peter)"
PERSONAL = rf"({NAMES}|I|He|She|We|They|You)"
IRREGULAR_PAST = {"saw", "ate", "drank", "read", "wrote", "bought", "sold", "met", "drew", "found", "lost"}
IRREGULAR_PAST |= {"made", "drove", "rode", "fed", "caught", "threw", "sent", "built", "sang"}
IRREGULAR_PAST |= {"taught", "spoke", "took", "brought", "gave", "slept", "swam", "ran"}
ADVERBS = {"often", "usually", "sometimes", "always"}


@pytest.fixture(scope="module")
def pairs() -> list[tuple[str, str]]:
    return generate_pairs(30_000, seed=0)


def _matching(pairs: list[tuple[str, str]], pattern: str) -> list[tuple[str, str]]:
    regex = re.compile(pattern)
    return [(en, zh) for en, zh in pairs if regex.search(en)]


# --- determinism and splits ---------------------------------------------------


def test_same_seed_gives_the_same_corpus() -> None:
    first = default_corpus(seed=7, n_train=2_000, n_valid=100, n_test=200)
    second = default_corpus(seed=7, n_train=2_000, n_valid=100, n_test=200)
    assert first == second


def test_different_seeds_give_different_corpora() -> None:
    first = default_corpus(seed=1, n_train=2_000, n_valid=100, n_test=200)
    second = default_corpus(seed=2, n_train=2_000, n_valid=100, n_test=200)
    assert first.train != second.train
    assert first.test != second.test


def test_splits_have_the_requested_sizes_and_do_not_overlap() -> None:
    corpus = default_corpus(seed=3, n_train=3_000, n_valid=150, n_test=250)
    assert isinstance(corpus, ParallelCorpus)
    assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (3_000, 150, 250)
    train = {en for en, _ in corpus.train}
    valid = {en for en, _ in corpus.valid}
    test = {en for en, _ in corpus.test}
    assert len(train) == 3_000 and len(valid) == 150 and len(test) == 250
    assert not train & valid and not train & test and not valid & test


def test_held_out_splits_do_not_depend_on_the_training_size() -> None:
    small = default_corpus(seed=4, n_train=500, n_valid=50, n_test=100)
    large = default_corpus(seed=4, n_train=3_000, n_valid=50, n_test=100)
    assert small.test == large.test
    assert small.valid == large.valid
    assert large.train[:500] == small.train


def test_generate_pairs_gives_distinct_sentences() -> None:
    pairs = generate_pairs(5_000, seed=5)
    assert len(pairs) == 5_000
    assert len({en for en, _ in pairs}) == 5_000
    assert generate_pairs(0) == []


def test_the_translation_is_a_function_of_the_english_sentence() -> None:
    translations: dict[str, str] = {}
    for seed in range(10, 16):
        for en, zh in generate_pairs(20_000, seed=seed):
            assert translations.setdefault(en, zh) == zh, en


def test_read_without_a_past_time_phrase_is_the_present(monkeypatch: pytest.MonkeyPatch) -> None:
    # "They read books" could be past or present; the grammar only makes it the present
    monkeypatch.setattr(grammar, "_VERB_LIST", (grammar._VERBS["read"],))
    found = _matching(generate_pairs(3_000), rf"^({NAMES} and {NAMES}|I|We|They|You) read\b")
    assert len(found) >= 50
    past = [(en, zh) for en, zh in found if re.search(r"\b(yesterday|ago|last)\b", en)]
    assert past
    for en, zh in found:
        assert ("了" in zh) == ((en, zh) in past), en


# --- size errors --------------------------------------------------------------


@pytest.mark.parametrize("n", [-1, MAX_PAIRS + 1])
def test_generate_pairs_rejects_impossible_sizes(n: int) -> None:
    with pytest.raises(ValueError, match="n"):
        generate_pairs(n)


@pytest.mark.parametrize("field", ["n_train", "n_valid", "n_test"])
def test_default_corpus_rejects_negative_sizes(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        default_corpus(**{field: -5})


def test_running_out_of_distinct_sentences_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grammar, "_sample_sentence", lambda rng: Clause(NP("Tom"), "chase", NP("Jerry")))
    assert generate_pairs(1) == [("Tom chases Jerry", "汤姆追逐杰瑞")]
    with pytest.raises(ValueError, match="distinct"):
        generate_pairs(2)


# --- hand-checked translations -----------------------------------------------

TOM, JERRY = NP("Tom"), NP("Jerry")

EXAMPLES = [
    (Clause(TOM, "chase", JERRY), "Tom chases Jerry", "汤姆追逐杰瑞"),
    (Clause(NP("they"), "chase", JERRY), "They chase Jerry", "他们追逐杰瑞"),
    (
        Clause(TOM, "read", NP("book", plural=True), place="in the library"),
        "Tom reads books in the library",
        "汤姆在图书馆看书",
    ),
    (
        Clause(TOM, "eat", NP("rice"), "past", time="yesterday"),
        "Tom ate rice yesterday",
        "汤姆昨天吃了米饭",
    ),
    (Clause(TOM, "chase", JERRY, "progressive"), "Tom is chasing Jerry", "汤姆在追逐杰瑞"),
    (
        Clause(TOM, "read", NP("book", "a"), "progressive", place="in the library"),
        "Tom is reading a book in the library",
        "汤姆正在图书馆看一本书",
    ),
    (Clause(TOM, "see", NP("film", "the"), "perfect"), "Tom has seen the film", "汤姆看过电影"),
    (
        Clause(NP("I"), "see", NP("film", "the"), "perfect", negated=True),
        "I have not seen the film",
        "我没看过电影",
    ),
    (Clause(TOM, "eat", tense="past", negated=True), "Tom did not eat", "汤姆没吃饭"),
    (
        Clause(TOM, "drink", NP("milk", "the"), "future", negated=True, time="tomorrow"),
        "Tom will not drink the milk tomorrow",
        "汤姆明天不会喝牛奶",
    ),
    (
        Clause(TOM, "buy", NP("car", "a"), "past", negated=True),
        "Tom did not buy a car",
        "汤姆没买汽车",
    ),
    (Clause(TOM, "have", NP("cat", "a"), negated=True), "Tom does not have a cat", "汤姆没有猫"),
    (
        Clause(NP("they"), "eat", NP("rice", "some"), "past", negated=True),
        "They did not eat any rice",
        "他们没吃米饭",
    ),
    (Clause(TOM, "have", NP("cat", "three", True)), "Tom has three cats", "汤姆有三只猫"),
    (Clause(TOM, "buy", NP("book", "two", True), "past"), "Tom bought two books", "汤姆买了两本书"),
    (Clause(TOM, "see", NP("dog", "a", adjective="big")), "Tom sees a big dog", "汤姆看见一只大狗"),
    (
        Clause(TOM, "draw", NP("flower", "a", adjective="beautiful"), "past"),
        "Tom drew a beautiful flower",
        "汤姆画了一朵漂亮的花",
    ),
    (
        Clause(NP("she"), "drink", NP("tea", "three", True, container="cup")),
        "She drinks three cups of tea",
        "她喝三杯茶",
    ),
    (
        Clause(NP("we"), "eat", NP("apple", "a"), adverb="often"),
        "We often eat an apple",
        "我们经常吃一个苹果",
    ),
    (
        Clause(NP("child", "the", True), "feed", NP("mouse", "this", True)),
        "The children feed these mice",
        "孩子喂这些老鼠",
    ),
    (
        Clause(TOM, "like", NP("cat", "the", relative=Relative("see", subject=JERRY, past=True))),
        "Tom likes the cat that Jerry saw",
        "汤姆喜欢杰瑞看见的猫",
    ),
    (
        Quality(NP("boy", "the", relative=Relative("chase", obj=NP("cat", "the"))), "tired"),
        "The boy who chases the cat is tired",
        "追逐猫的男孩很累",
    ),
    (
        Clause(TOM, "sing", tense="past", place="in the park", time="last Sunday"),
        "Tom sang in the park last Sunday",
        "汤姆上个星期天在公园里唱歌了",
    ),
    (Clause(TOM, "chase", JERRY, question=True), "Does Tom chase Jerry?", "汤姆追逐杰瑞吗？"),
    (
        Clause(NP("you"), "eat", NP("apple", "a"), "past", question=True),
        "Did you eat an apple?",
        "你吃了一个苹果吗？",
    ),
    (Clause(TOM, "eat", question=True, wh="what"), "What does Tom eat?", "汤姆吃什么？"),
    (
        Clause(TOM, "eat", tense="past", question=True, wh="what", time="yesterday"),
        "What did Tom eat yesterday?",
        "汤姆昨天吃了什么？",
    ),
    (Clause(None, "chase", JERRY, question=True, wh="who"), "Who chases Jerry?", "谁追逐杰瑞？"),
    (Clause(TOM, "help", question=True, wh="whom"), "Who does Tom help?", "汤姆帮助谁？"),
    (Clause(TOM, "read", question=True, wh="where"), "Where does Tom read?", "汤姆在哪里看书？"),
    (
        Clause(TOM, "visit", JERRY, "future", question=True, wh="when"),
        "When will Tom visit Jerry?",
        "汤姆什么时候会拜访杰瑞？",
    ),
    (
        Clause(TOM, "have", NP("cat", "how many", True), question=True, wh="how many"),
        "How many cats does Tom have?",
        "汤姆有几只猫？",
    ),
    (
        Clause(TOM, "give", NP("book", "a"), "past", recipient=NP("she")),
        "Tom gave her a book",
        "汤姆给了她一本书",
    ),
    (Quality(NP("cat", "the"), "cute"), "The cat is cute", "猫很可爱"),
    (
        Quality(NP("I"), "tired", negated=True, very=True, past=True, time="yesterday"),
        "I was not very tired yesterday",
        "我昨天不太累",
    ),
    (
        Quality(NP("film", "this"), "interesting", question=True),
        "Is this film interesting?",
        "这部电影有趣吗？",
    ),
    (Comparison(TOM, "tall", JERRY), "Tom is taller than Jerry", "汤姆比杰瑞高"),
    (Comparison(TOM, "tall", NP("he"), negated=True), "Tom is not taller than him", "汤姆没有他高"),
    (Comparison(None, "tall", JERRY), "Who is taller than Jerry?", "谁比杰瑞高？"),
    (Identity(TOM, NP("teacher", "a")), "Tom is a teacher", "汤姆是老师"),
    (
        Identity(NP("Tom", conjunct="Jerry"), NP("friend", "my", True), negated=True),
        "Tom and Jerry are not my friends",
        "汤姆和杰瑞不是我的朋友",
    ),
    (Existence(NP("cat", "a"), "in the garden"), "There is a cat in the garden", "花园里有一只猫"),
    (
        Existence(NP("book", "no", True), "on the table", past=True, time="yesterday"),
        "There were no books on the table yesterday",
        "昨天桌子上没有书",
    ),
    (
        Existence(NP("bird", "how many", True), "in the tree", question=True),
        "How many birds are there in the tree?",
        "树上有几只鸟？",
    ),
]


@pytest.mark.parametrize(("sentence", "english", "chinese"), EXAMPLES, ids=[e[1] for e in EXAMPLES])
def test_hand_checked_translations(sentence: grammar.Sentence, english: str, chinese: str) -> None:
    assert render(sentence) == (english, chinese)


def test_the_sampler_produces_the_classic_example_pattern(pairs: list[tuple[str, str]]) -> None:
    # "Tom chases Jerry": a name, "chases", a name, nothing else
    found = _matching(pairs, rf"^{NAMES} chases {NAMES}$")
    assert found
    for en, zh in found:
        assert re.fullmatch(r"[^了过在]+追逐[^了过在]+", zh), en


# --- phenomena in the generated data ------------------------------------------


@pytest.mark.parametrize("marker", ["了", "在", "正在", "过", "不", "没", "会", "吗", "比", "的", "很", "有"])
def test_chinese_markers_appear(pairs: list[tuple[str, str]], marker: str) -> None:
    assert sum(marker in zh for _, zh in pairs) >= 50


def test_measure_words_follow_numbers(pairs: list[tuple[str, str]]) -> None:
    measured = re.compile(
        "[一两三四五六七八九十几](只|本|个|辆|杯|条|张|把|朵|位|件|头|首|座|块|根|份|封|部|台|扇|支|碗|瓶|匹|棵)"
    )
    found = {m.group(1) for _, zh in pairs for m in measured.finditer(zh)}
    assert {"只", "本", "个", "辆", "杯", "条", "张", "把", "朵"} <= found


def test_two_is_liang_before_a_measure_word(pairs: list[tuple[str, str]]) -> None:
    with_two = _matching(pairs, r"\btwo\b")
    assert len(with_two) > 100
    for en, zh in with_two:
        assert "两" in zh and "二" not in zh.replace("星期二", ""), en


def test_negation_uses_bu_for_present_and_future_and_mei_for_past(pairs: list[tuple[str, str]]) -> None:
    for en, zh in _matching(pairs, r" (did|has|have) not "):
        assert "没" in zh and "不" not in zh, en
    for en, zh in _matching(pairs, r" will not "):
        assert "不会" in zh, en
    present = [(en, zh) for en, zh in _matching(pairs, r" (does|do) not ") if " have " not in en]
    assert present
    for en, zh in present:
        assert "不" in zh and "没" not in zh, en


def test_aspect_markers_follow_the_english_tense(pairs: list[tuple[str, str]]) -> None:
    perfect = _matching(pairs, rf"^{PERSONAL} (has|have) (seen|eaten|written|bought|found|\w+ed)\b")
    progressive = _matching(pairs, rf"^{PERSONAL} (is|am|are) \w+ing\b")
    past = _matching(pairs, rf"^{PERSONAL} ((?!(need|feed)\b)\w+ed|saw|ate|bought|wrote|drank)\b")
    assert perfect and progressive and past
    for en, zh in perfect:
        assert "过" in zh, en
    for en, zh in progressive:
        assert "在" in zh, en
    for en, zh in past:
        assert "了" in zh, en


def test_questions_are_marked(pairs: list[tuple[str, str]]) -> None:
    wh_words = {"What": "什么", "Who": "谁", "Where": "哪里", "When": "什么时候", "How": "几"}
    for en, zh in pairs:
        if not en.endswith("?"):
            continue
        first = en.split()[0]
        if first in wh_words:
            assert wh_words[first] in zh and not zh.endswith("吗？"), en
        else:
            assert zh.endswith("吗？"), en


PLACES = {"in the library": "图书馆", "in the park": "公园里", "at school": "学校", "at home": "家"}
TIMES = {"yesterday": "昨天", "tomorrow": "明天", "every day": "每天", "last week": "上个星期"}


def test_time_and_place_move_before_the_verb(pairs: list[tuple[str, str]]) -> None:
    checked = 0
    for en, zh in pairs:
        if "there" in en.lower():  # "There is a cat in the garden" has no 在
            continue
        for place_en, place_zh in PLACES.items():
            for time_en, time_zh in TIMES.items():
                if en.endswith(f" {place_en} {time_en}"):
                    checked += 1
                    # "Tom ate rice at home yesterday" → "汤姆昨天在家吃了米饭"
                    assert re.search(f"{time_zh}[^在]{{0,2}}在{place_zh}.", zh), en
    assert checked >= 5


RELATIVE_HEADS = {"cat": "猫", "dog": "狗", "book": "书", "boy": "男孩", "girl": "女孩", "car": "汽车"}


def test_relative_clauses_come_before_the_noun(pairs: list[tuple[str, str]]) -> None:
    pattern = r"\bthe (cat|dog|book|boy|girl|car) (that|who) "
    relatives = _matching(pairs, pattern)
    assert len(relatives) >= 20
    for en, zh in relatives:
        for match in re.finditer(pattern, en):
            assert "的" + RELATIVE_HEADS[match.group(1)] in zh, en


def test_adjectives_with_and_without_de(pairs: list[tuple[str, str]]) -> None:
    big = _matching(pairs, r"\b(a|the) big (cat|dog|car|box)s?\b")
    beautiful = _matching(pairs, r"\b(a|the) beautiful (flower|girl|house)s?\b")
    assert big and beautiful
    for en, zh in big:
        assert re.search("大(猫|狗|汽车|盒子)", zh), en
    for en, zh in beautiful:
        assert re.search("漂亮的(花|女孩|房子)", zh), en


# --- well-formedness ----------------------------------------------------------


def test_english_is_well_formed(pairs: list[tuple[str, str]]) -> None:
    for en, _ in pairs:
        assert re.fullmatch(r"[A-Z][A-Za-z']*( [A-Za-z']+)*\??", en), en
        assert 3 <= len(en.rstrip("?").split()) <= 16, en


def test_chinese_is_well_formed(pairs: list[tuple[str, str]]) -> None:
    for en, zh in pairs:
        assert zh and not re.search(r"[A-Za-z0-9\s?.!,。！，]", zh), zh
        assert zh.endswith("？") == en.endswith("?"), (en, zh)
        assert "？" not in zh[:-1], zh


def test_articles_agree_with_the_next_word(pairs: list[tuple[str, str]]) -> None:
    for en, _ in pairs:
        words = en.lower().rstrip("?").split()
        for article, word in itertools.pairwise(words):
            if article == "a":
                assert word[0] not in "aeiou", en
            elif article == "an":
                assert word[0] in "aeiou", en


def test_verbs_agree_with_their_subject(pairs: list[tuple[str, str]]) -> None:
    singular = _matching(pairs, rf"^({NAMES}|He|She) (?!and )")
    plural = _matching(pairs, rf"^({NAMES} and {NAMES}|We|They|You) ")
    assert len(singular) > 100 and len(plural) > 100
    auxiliaries = {"is", "was", "has", "does", "did", "will"}
    for en, _ in singular:
        verb = en.split()[1]
        if verb in ADVERBS:
            verb = en.split()[2]
        assert verb in auxiliaries or verb in IRREGULAR_PAST or verb.endswith(("s", "ed")), en
    for en, _ in plural:
        verb = en.split()[3 if " and " in en else 1]
        assert verb in ADVERBS or not verb.endswith("s"), en


ENGLISH_FORMS = [
    (Clause(NP("child", "the", True), "eat", tense="past"), "The children ate"),
    (Clause(NP("she"), "swim", tense="progressive"), "She is swimming"),
    (Clause(NP("he"), "write", NP("letter", "a"), "perfect"), "He has written a letter"),
    (Clause(TOM, "wash", NP("box", "two", True)), "Tom washes two boxes"),
    (
        Clause(NP("wolf", "the", True), "chase", NP("baby", "the", True), "past"),
        "The wolves chased the babies",
    ),
    (Clause(NP("I"), "study", NP("math"), "progressive"), "I am studying math"),
    (Clause(TOM, "buy", NP("car", "a", adjective="old"), "past"), "Tom bought an old car"),
    (Clause(NP("we"), "borrow", NP("umbrella", "a"), "future"), "We will borrow an umbrella"),
    (Clause(NP("you"), "catch", NP("mouse", "the", True), "past", question=True), "Did you catch the mice?"),
    (Clause(NP("they"), "fix", NP("bike", "my"), question=True), "Do they fix my bike?"),
    (Clause(NP("he"), "cry", question=True), "Does he cry?"),
]


@pytest.mark.parametrize(("sentence", "english"), ENGLISH_FORMS, ids=[e[1] for e in ENGLISH_FORMS])
def test_english_morphology(sentence: grammar.Sentence, english: str) -> None:
    assert render(sentence)[0] == english
