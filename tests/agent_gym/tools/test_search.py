import jsonschema
import numpy as np
import pytest

from agent_gym.core.noise import RetrievalNoise, ToolNoise
from agent_gym.core.tool import ToolContext
from agent_gym.retrieval import BM25Retriever, Hit, Passage
from agent_gym.tools import SearchTool, format_passages

CITIES = [
    Passage("paris", "Paris", "Paris is the capital and largest city of France."),
    Passage("tokyo", "Tokyo", "Tokyo is the capital of Japan and its most populous city."),
    Passage("lima", "Lima", "Lima is the capital of Peru, on the Pacific coast."),
    Passage("nairobi", "Nairobi", "Nairobi is the capital of Kenya."),
    Passage("seine", "Seine", "The Seine flows through Paris."),
]
for i in range(20):
    CITIES.append(Passage(f"filler{i}", f"Filler {i}", f"An unrelated paragraph about topic number {i}."))


@pytest.fixture(scope="module")
def retriever() -> BM25Retriever:
    return BM25Retriever(CITIES)


def ctx(seed: int = 0, **retrieval: float) -> ToolContext:
    return ToolContext(rng=np.random.default_rng(seed), noise=ToolNoise(retrieval=RetrievalNoise(**retrieval)))


def test_schema_and_description():
    tool = SearchTool(BM25Retriever(CITIES))
    schema = tool.schema()
    assert schema["function"]["name"] == "search" and "paragraphs" in schema["function"]["description"]
    jsonschema.Draft202012Validator.check_schema(schema["function"]["parameters"])
    assert schema["function"]["parameters"]["required"] == ["query"]


def test_formats_numbered_passages_and_reports_evidence(retriever):
    result = SearchTool(retriever, k=2).call({"query": "capital of France Paris"})
    assert result.ok
    lines = result.content.splitlines()
    assert lines[0] == "Doc 1 (Title: Paris): Paris is the capital and largest city of France."
    assert lines[1].startswith("Doc 2 (Title: ")
    assert result.metadata["evidence"] == result.metadata["passage_ids"] == result.metadata["retrieved_ids"]
    assert result.metadata["evidence"][0] == "paris" and len(result.metadata["scores"]) == 2
    assert result.metadata["scores"][0] >= result.metadata["scores"][1] > 0


def test_allowed_restricts_results(retriever):
    result = SearchTool(retriever, k=3, allowed={"lima", "nairobi"}).call({"query": "capital of France"})
    assert set(result.metadata["evidence"]) <= {"lima", "nairobi"} and "Paris" not in result.content


def test_truncates_each_passage():
    long = Passage("long", "Long", "word " * 500)
    result = SearchTool(BM25Retriever([long, *CITIES]), k=1, max_passage_chars=40).call({"query": "word"})
    assert result.content.startswith("Doc 1 (Title: Long): ") and result.content.endswith("...")
    assert len(result.content) == len("Doc 1 (Title: Long): ") + 39 + 3  # 40 chars, trailing space stripped


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_empty_query_is_an_error_result(retriever, query):
    result = SearchTool(retriever).call({"query": query})
    assert not result.ok and "empty" in result.content and result.metadata["reason"] == "empty_query"


@pytest.mark.parametrize("arguments", [{}, {"query": 3}, {"query": "x", "k": 9}, "paris"])
def test_bad_arguments_are_error_results(retriever, arguments):
    result = SearchTool(retriever).call(arguments)
    assert not result.ok and result.metadata["reason"] == "invalid_arguments"


def test_no_hits_is_ok_and_says_so(retriever):
    result = SearchTool(retriever).call({"query": "the of and zzzzqx"})
    assert result.ok and "No results found" in result.content and result.metadata["evidence"] == []


def test_retriever_exception_becomes_error_result(retriever):
    result = SearchTool(retriever, allowed={"not-a-passage"}).call({"query": "Paris"})
    assert not result.ok and "not in the corpus" in result.content


def test_constructor_validation(retriever):
    with pytest.raises(ValueError, match="k must be a positive integer"):
        SearchTool(retriever, k=0)
    with pytest.raises(ValueError, match="max_passage_chars"):
        SearchTool(retriever, max_passage_chars=0)
    with pytest.raises(TypeError, match="not a single string"):
        SearchTool(retriever, allowed="paris")


def test_inactive_noise_leaves_rng_untouched(retriever):
    c = ctx(0)
    before = c.rng.bit_generator.state
    SearchTool(retriever).call({"query": "capital"}, c)
    assert c.rng.bit_generator.state == before


def test_same_seed_same_noisy_results(retriever):
    tool = SearchTool(retriever, k=4)
    noise = {"drop_prob": 0.3, "shuffle_prob": 0.5, "distractor_prob": 0.3}

    def episode(seed: int) -> list[dict]:
        c = ctx(seed, **noise)  # one generator across the episode's calls, as in an env
        return [dict(tool.call({"query": q}, c).metadata) for q in ("capital", "Paris", "city")]

    for seed in range(5):
        assert episode(seed) == episode(seed)


def test_noise_changes_results_across_seeds(retriever):
    tool = SearchTool(retriever, k=4)
    noise = {"drop_prob": 0.3, "shuffle_prob": 0.5, "distractor_prob": 0.3}
    shown = {tuple(tool.call({"query": "capital"}, ctx(seed, **noise)).metadata["evidence"]) for seed in range(20)}
    assert len(shown) > 5
    clean = tuple(tool.call({"query": "capital"}).metadata["evidence"])
    assert shown != {clean}


def test_distractors_come_from_the_pool_and_have_no_score(retriever):
    allowed = {"paris", "tokyo", "lima", "nairobi", "seine"}
    tool = SearchTool(retriever, k=2, allowed=allowed)
    result = tool.call({"query": "capital of France"}, ctx(3, distractor_prob=1.0))
    assert result.metadata["noise_events"] == ["distractor", "distractor"]
    assert set(result.metadata["evidence"]) <= allowed
    assert not set(result.metadata["evidence"]) & set(result.metadata["retrieved_ids"])
    assert result.metadata["scores"] == [None, None]
    pool = [CITIES[5], CITIES[6]]
    explicit = SearchTool(retriever, k=2, distractor_pool=pool).call({"query": "Paris"}, ctx(3, distractor_prob=1.0))
    assert set(explicit.metadata["evidence"]) <= {p.id for p in pool}


def test_drop_everything_reports_no_results(retriever):
    result = SearchTool(retriever).call({"query": "capital"}, ctx(0, drop_prob=1.0))
    assert result.ok and "No results found" in result.content and result.metadata["evidence"] == []
    assert result.metadata["retrieved_ids"] and result.metadata["noise_events"] == ["drop"]


def test_works_with_any_retriever_protocol_object():
    class Fixed:
        passages = CITIES[:2]

        def search(self, query, k=5, allowed=None):
            return [Hit(p, 1.0 / r, r) for r, p in enumerate(self.passages[:k], start=1)]

        def search_batch(self, queries, k=5, allowed=None):
            return [self.search(q, k, allowed) for q in queries]

    result = SearchTool(Fixed(), k=1).call({"query": "anything"})
    assert result.content == "Doc 1 (Title: Paris): Paris is the capital and largest city of France."


def test_format_passages_collapses_whitespace():
    assert format_passages([Passage("a", "T", "one\n two  three")], 100) == "Doc 1 (Title: T): one two three"
