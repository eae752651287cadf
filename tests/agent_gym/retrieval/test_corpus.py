import gzip
import hashlib
import json

import pytest

from agent_gym.retrieval import DatasetFormatError, Passage, dedupe_passages, load_corpus, parse_contents, passage_id


def test_passage_id_is_title_and_sha1_prefix():
    digest = hashlib.sha1(b"Paris\nParis is in France.").hexdigest()[:10]
    assert passage_id("Paris", "Paris is in France.") == f"Paris#{digest}"
    assert passage_id("Paris", "Paris is in France.") != passage_id("Paris", "Paris is in Texas.")


def test_passage_contents_and_validation():
    p = Passage("x", "Title", "Body.")
    assert p.contents == "Title\nBody."
    with pytest.raises(TypeError, match=r"Passage\.text must be a str"):
        Passage("x", "Title", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="id must not be empty"):
        Passage("", "Title", "Body.")


@pytest.mark.parametrize(
    ("contents", "expected"),
    [
        ('"Evan Morris"\nEvan Morris was a lobbyist.', ("Evan Morris", "Evan Morris was a lobbyist.")),
        ("Evan Morris\nEvan Morris was a lobbyist.", ("Evan Morris", "Evan Morris was a lobbyist.")),
        ("no title line", ("", "no title line")),
        ('"A "quoted" title"\ntext\nmore', ('A "quoted" title', "text\nmore")),
    ],
)
def test_parse_contents(contents, expected):
    assert parse_contents(contents) == expected


def _write_jsonl(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def test_load_jsonl_id_contents(tmp_path):
    path = _write_jsonl(
        tmp_path / "c.jsonl",
        [{"id": "0", "contents": '"Paris"\nParis is the capital.'}, {"id": 1, "contents": "Rome\nRome too."}],
    )
    assert load_corpus(path) == [Passage("0", "Paris", "Paris is the capital."), Passage("1", "Rome", "Rome too.")]


def test_load_json_list_title_text_gets_stable_ids(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps([{"title": "Teutberga", "text": "A queen."}, {"title": "B", "text": "Bee."}]))
    corpus = load_corpus(path)
    assert [p.id for p in corpus] == [passage_id("Teutberga", "A queen."), passage_id("B", "Bee.")]
    assert corpus[0].title == "Teutberga" and corpus[0].text == "A queen."


def test_load_gzip_skips_blank_lines_and_exact_duplicates(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    lines = [json.dumps({"id": "a", "title": "A", "text": "x"}), "", json.dumps({"id": "a", "title": "A", "text": "x"})]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines))
    assert load_corpus(path) == [Passage("a", "A", "x")]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '{"id": "a", "contents": "A\\nx"}\n{"id": "b", "contents": \n',
            r"c\.jsonl: record 1 \(line 2\): invalid JSON",
        ),
        ('{"id": "a", "contents": "A\\nx"}\n[1, 2]\n', r"c\.jsonl: record 1: expected a JSON object, got list"),
        ('{"id": "a", "contents": "A\\nx"}\n{"id": "b"}\n', r"record 1: needs 'contents' or 'text'"),
        ('{"id": "a", "contents": ["A", "x"]}\n', r"record 0: field 'contents' must be a string"),
        ('{"id": true, "contents": "A\\nx"}\n', r"record 0: field 'id' must be a string"),
        ('{"id": "", "contents": "A\\nx"}\n', r"record 0: empty 'id'"),
        ("\n\n", r"c\.jsonl: the file is empty"),
        ("[]", r"c\.jsonl: no passages found"),
        ('{"id": "a", "contents": "A\\nx"}\n{"id": "a", "contents": "B\\ny"}\n', r"two different passages share"),
    ],
)
def test_bad_jsonl_names_file_and_record(tmp_path, body, message):
    path = tmp_path / "c.jsonl"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=message):
        load_corpus(path)


def test_bad_json_list_names_record(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps([{"title": "A", "text": "x"}, "oops"]))
    with pytest.raises(DatasetFormatError, match=r"c\.json: record 1: expected a JSON object, got str"):
        load_corpus(path)
    path.write_text("[{]")
    with pytest.raises(DatasetFormatError, match=r"c\.json: record 0: invalid JSON"):
        load_corpus(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="corpus file not found"):
        load_corpus(tmp_path / "nope.jsonl")


def test_dedupe_keeps_first_seen_order():
    a, b = Passage("a", "A", "x"), Passage("b", "B", "y")
    assert dedupe_passages([a, b, Passage("a", "A", "x"), b]) == [a, b]
    with pytest.raises(ValueError, match="'a'"):
        dedupe_passages([a, Passage("a", "A", "changed")])


def test_shared_dpr_and_2wiki_corpora(shared_data):
    wiki = load_corpus(shared_data / "corpus" / "wiki18_100w_sample_1000.jsonl")
    assert len(wiki) == 1000
    assert wiki[0] == Passage("0", "Evan Morris", wiki[0].text) and wiki[0].text.startswith("Evan Morris Evan L.")
    two_wiki = load_corpus(shared_data / "2wikimultihopqa" / "corpus_6119_passages.json")
    assert two_wiki[0].title == "Teutberga" and two_wiki[0].id == passage_id("Teutberga", two_wiki[0].text)
    assert len(two_wiki) == 6119
