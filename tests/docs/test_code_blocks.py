"""Every fenced code block of README.md and docs/ is run by a test, or says why it is not (docs/tests.md).

* ``python`` blocks run: the blocks of one page in order, in one namespace, in an empty folder holding a
  link to ``configs/`` (and ``../shared/data`` when the shared data is present; a page that reads it skips
  without it). The pages that train a model are marked slow (``SLOW_PAGES``); CI runs them after the suite.
* ``bash`` blocks are checked command by command without running the slow ones: ``agent-r1`` lines parse
  with the CLI's own parsers (``train`` lines also load and validate their config with every ``--set``),
  benchmark and script lines parse with the script's ``parse_args`` (or answer ``--help``), ``pip install``
  names declared extras, ``bash scripts/X.sh`` exists, ``accelerate launch`` names a config that exists and
  a command that parses, and the retrieval server's ``curl`` is sent to a server started here.
* ``console`` blocks: each ``$ agent-r1 ...`` line runs and prints exactly the lines below it.
* ``yaml`` blocks are laid over ``configs/tiny.yaml`` and validated as a ``TrainConfig``.

Any other block needs a marker on the line before its fence: ``<!-- not-run: REASON -->``,
``<!-- run-by: tests/PATH.py -->`` (that test runs it) or ``<!-- run-with: tiny-random -->`` (a Python block
run with the tiny random model in place of SmolLM2). The pages of a running experiment, which this test
must not edit, keep their reasons in ``EXPERIMENT_MARKS``.
"""

from __future__ import annotations

import configparser
import contextlib
import importlib.util
import io
import operator
import os
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import torch_threads

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^( *)```([\w-]*)[ \t]*$")
MARKER = re.compile(r"^<!-- (not-run|run-by|run-with): (.+?) -->$")
RUN_KINDS = {"python", "bash", "console", "yaml"}
README_MAX_LINES = 250
# The reasons for blocks that no test runs and whose page must not carry a marker (none at present), keyed by
# (page, first line of the block).
EXPERIMENT_MARKS: dict[tuple[str, str], str] = {}
# imports that only an optional extra provides: a page that needs a missing one skips, naming it
OPTIONAL_MODULES = {"verifiers", "skyrl_gym", "openenv", "ray", "textworld", "fastapi", "uvicorn"}


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # the opening fence's line (1-based)
    lang: str
    body: str
    marker: tuple[str, str] | None

    @property
    def first(self) -> str:
        return self.body.splitlines()[0].strip() if self.body.strip() else ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def read_blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, each with the marker on the line before it (if any)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, end = len(opened.group(1)), i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), f"{path}:{i + 1}: a code block that never closes"
        body = "\n".join(line[indent:] for line in lines[i + 1 : end])
        before = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        found = MARKER.match(before)
        marker = (found.group(1), found.group(2).strip()) if found else None
        blocks.append(Block(str(path.relative_to(ROOT)), i + 1, opened.group(2), body, marker))
        i = end + 1
    return blocks


BLOCKS = [block for page in PAGES for block in read_blocks(page)]


def runs(block: Block, lang: str) -> bool:
    """Whether this test runs ``block`` as ``lang``."""
    unmarked = block.marker is None or block.marker[0] == "run-with"
    return block.lang == lang and unmarked and (block.page, block.first) not in EXPERIMENT_MARKS


def pages_with(lang: str) -> list[str]:
    return sorted({b.page for b in BLOCKS if runs(b, lang)})


# pages whose Python blocks train a model or draw hundreds of episodes (tens of seconds on 2 CPU cores): slow, run
# by .ci/run after the suite
SLOW_PAGES = {"docs/ppo.md", "docs/integrations.md", "docs/property_testing.md"}


def python_pages() -> list[Any]:
    return [pytest.param(p, marks=pytest.mark.slow) if p in SLOW_PAGES else p for p in pages_with("python")]


# ------------------------------------------------------------------------------------------------ the rule


def test_every_block_is_run_or_marked_with_a_reason():
    problems = []
    for block in BLOCKS:
        kind, value = block.marker or ("", "")
        if kind == "not-run" and len(value.split()) < 3:
            problems.append(f"{block.where}: a not-run marker needs a reason of a few words (got {value!r})")
        elif kind == "run-by":
            test = ROOT / value
            if not test.is_file() or Path(block.page).name not in test.read_text(encoding="utf-8"):
                problems.append(f"{block.where}: run-by {value}: no such test, or it does not read {block.page}")
        elif kind == "run-with" and (value != "tiny-random" or block.lang != "python" or "smollm2" not in block.body):
            problems.append(f"{block.where}: run-with takes 'tiny-random' on a Python block that loads smollm2")
        elif not kind and (block.page, block.first) not in EXPERIMENT_MARKS and block.lang not in RUN_KINDS:
            problems.append(
                f"{block.where}: a ```{block.lang or '(no language)'} block that no test runs: make it python, bash, "
                "console or yaml, or put <!-- not-run: REASON --> on the line before it"
            )
    assert not problems, "\n".join(problems)


def test_the_block_reader_finds_every_block_and_no_stale_experiment_mark():
    for page in PAGES:
        fences = sum(1 for line in page.read_text(encoding="utf-8").splitlines() if line.strip().startswith("```"))
        assert fences == 2 * sum(b.page == str(page.relative_to(ROOT)) for b in BLOCKS), page
    assert len(BLOCKS) > 60
    assert set(EXPERIMENT_MARKS) <= {(b.page, b.first) for b in BLOCKS}, "an experiment mark matches no block"
    assert {"python", "bash", "console", "yaml"} <= {b.lang for b in BLOCKS if runs(b, b.lang)}
    assert SLOW_PAGES <= set(pages_with("python")), "a slow page without Python blocks"


# ------------------------------------------------------------------------------------------------ README


def test_the_readme_is_a_landing_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the reference belongs in docs/"


def test_the_readme_links_to_pages_that_exist():
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    local = [link.split("#")[0] for link in links if "://" not in link and not link.startswith("#")]
    assert len(local) > 20 and all(link.startswith("docs/") for link in local)
    assert [link for link in local if not (ROOT / link).is_file()] == []


def test_the_readme_states_the_test_commands_ci_calls():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").replace("\\\n", " ")
    calls = [" ".join(line.split()) for line in ci.splitlines() if line.strip().startswith("bash scripts/test.sh")]
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert calls and "bash scripts/test.sh" in calls
    for call in calls:
        assert call in readme, f"README.md must state the test command CI calls: {call}"


# ------------------------------------------------------------------------------------------------ python


def shared_data() -> Path | None:
    folder = Path(os.environ.get("AGENT_R1_SHARED_DATA", ROOT.parent / "shared" / "data"))
    return folder if folder.is_dir() else None


@pytest.fixture
def docs_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder with ``configs/`` and ``docs/`` (the results pages read the sweeps' archives there)
    linked in, and ``../shared/data`` when it exists."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "configs").symlink_to(ROOT / "configs")
    (work / "docs").symlink_to(ROOT / "docs")
    if shared_data():
        (tmp_path / "shared").mkdir()
        (tmp_path / "shared" / "data").symlink_to(shared_data())
    monkeypatch.chdir(work)
    return work


def python_source(block: Block) -> str:
    source = block.body
    if block.marker == ("run-with", "tiny-random"):
        source = source.replace('load_model("smollm2")', 'load_model("tiny-random")')
        assert source != block.body, f'{block.where}: run-with tiny-random, but no load_model("smollm2")'
    return "\n" * block.line + source  # tracebacks name the page's own line numbers


@pytest.mark.parametrize("page", python_pages())
def test_python_blocks_run(page: str, docs_folder: Path):
    blocks = [b for b in BLOCKS if b.page == page and runs(b, "python")]
    if any("../shared/data" in b.body for b in blocks) and not shared_data():
        pytest.skip(f"{page} reads ../shared/data, which is absent")
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    with torch_threads():
        for block in blocks:
            try:
                exec(compile(python_source(block), block.page, "exec"), namespace)
            except ModuleNotFoundError as err:
                if (err.name or "").split(".")[0] in OPTIONAL_MODULES:
                    pytest.skip(f"{block.where} needs {err.name} (an optional extra)")
                raise


# ------------------------------------------------------------------------------------------------ bash


def command_lines(body: str) -> Iterator[tuple[str, list[str]]]:
    """Each command of a bash block: its text and argv, comments, ``&`` and ``VAR=value`` prefixes removed."""
    for line in body.replace("\\\n", " ").splitlines():
        argv = shlex.split(line, comments=True)
        if argv and argv[-1] == "&":
            argv = argv[:-1]
        while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
            argv = argv[1:]
        if argv:
            yield line.strip(), argv


def parses(parser: Any, argv: list[str]) -> Any:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv)
    except SystemExit as exit_:
        raise AssertionError(f"{parser.prog} refuses {argv}: {err.getvalue().strip()}") from exit_


def check_agent_r1(args: list[str]) -> None:
    from agent_trainers.cli import build_parser
    from agent_trainers.pipeline.cli import main, parse_set

    if args[0] == "eval":
        from agent_trainers.pipeline.eval_commands import build_eval_parser, env_kwargs_from_args, eval_rollout
        from agent_trainers.rollout.cli import rollout_config_from_args

        ns = parses(build_eval_parser(), args[1:])
        rollout_config_from_args(ns, eval_rollout())
        env_kwargs_from_args(ns)
    elif args[0] == "rollout":
        from agent_trainers.rollout.cli import build_parser as rollout_parser

        parses(rollout_parser(), args[1:])
    elif args[0] == "serve-retrieval":
        from agent_gym.retrieval.server import _parser

        parses(_parser(), args[1:])
    else:
        ns = parses(build_parser(), args)
        if ns.command == "train":
            from agent_trainers.pipeline.config import load_config

            load_config(ns.config, parse_set(ns.set))
        elif ns.command == "sweep":
            from agent_trainers.experiments import load_sweep, plan_runs

            spec = load_sweep(ns.name)
            if ns.seeds:
                spec = spec.model_copy(update={"seeds": [int(s) for s in ns.seeds.split(",")]})
            assert plan_runs(spec, ns.out or "runs/sweep", parse_set(ns.set))
        elif ns.command == "envs":
            with contextlib.redirect_stdout(io.StringIO()) as out:
                assert main(["envs"]) == 0
            assert "AgentR1/HotpotQA-v0" in out.getvalue()


def check_module(module: str, args: list[str]) -> None:
    if module == "agent_trainers.pipeline.cli":
        check_agent_r1(args)
    elif module == "agent_trainers.rollout":
        check_agent_r1(["rollout", *args])
    elif module == "agent_gym.retrieval.server":
        check_agent_r1(["serve-retrieval", *args])
    else:
        raise AssertionError(f"python -m {module}: this test does not know how to check it; mark the block")


def check_script(path: str, args: list[str]) -> None:
    assert path.startswith(("benchmarks/", "scripts/")) and (ROOT / path).is_file(), f"no script {path}"
    name = f"_docs_{Path(path).parent.name}_{Path(path).stem}"
    module = sys.modules.get(name)
    if module is None:  # registered before it runs: its dataclasses look their module up
        spec = importlib.util.spec_from_file_location(name, ROOT / path)
        module = sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    if hasattr(module, "parse_args"):  # every benchmark: its Args dataclass, parsed by tyro
        with contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                module.parse_args(args)
            except SystemExit as exit_:
                raise AssertionError(f"{path} refuses {args}: {err.getvalue().strip()[-500:]}") from exit_
        return
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0, f"{path} --help failed"


def declared_extras() -> set[str]:
    """The extras of the package, from pyproject.toml (PEP 621) or setup.cfg, whichever declares them."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(pyproject.get("project", {}).get("optional-dependencies", {}))
    if (ROOT / "setup.cfg").is_file():
        cfg = configparser.ConfigParser()
        cfg.read(ROOT / "setup.cfg")
        if cfg.has_section("options.extras_require"):
            extras |= set(cfg["options.extras_require"])
    return extras


def check_pip(args: list[str]) -> None:
    assert args[0] == "install", args
    for arg in args[1:]:
        name = re.fullmatch(r"agent-r1-gym(?:\[([\w,-]+)\])?", arg)
        assert name or arg.startswith("-"), f"pip install {arg}: only this package's extras are documented"
        if name and name.group(1):
            missing = set(name.group(1).split(",")) - declared_extras()
            assert not missing, f"pip install {arg}: no such extra {sorted(missing)}"


def check_accelerate(args: list[str]) -> None:
    assert args[0] == "launch", args
    config = args[args.index("--config_file") + 1]
    assert (ROOT / config).is_file(), f"accelerate launch --config_file {config}: no such file"
    module = args.index("-m")
    check_module(args[module + 1], args[module + 2 :])


def send_curl(args: list[str]) -> None:
    """Send a documented ``curl`` to the retrieval server (on the embedded HotpotQA sample) as curl would."""
    import httpx

    from agent_gym.datasets import load_qa
    from agent_gym.retrieval.corpus import dedupe_passages
    from agent_gym.retrieval.server import BackgroundServer, build_retriever, create_app

    headers = {"Content-Type": "application/x-www-form-urlencoded"}  # curl -d's default
    data, url, rest = None, None, iter(args)
    for arg in rest:
        if arg == "-H":
            key, _, value = next(rest).partition(":")
            headers[key.strip()] = value.strip()
        elif arg == "-d":
            data = next(rest)
        elif not arg.startswith("-"):
            url = arg
    assert url and data is not None, f"curl {args}: needs a URL and -d"
    sample = ROOT / "agent_gym" / "data" / "hotpotqa_original_sample.json"
    paragraphs = dedupe_passages(p.to_passage() for t in load_qa(sample) for p in t.paragraphs)
    with BackgroundServer(create_app(build_retriever("bm25", paragraphs))) as server:
        path = urlsplit(url if "://" in url else f"http://{url}").path
        reply = httpx.post(f"http://{server.host}:{server.port}{path}", content=data, headers=headers)
    assert reply.status_code == 200, f"curl {' '.join(args)} -> {reply.status_code} {reply.text[:200]}"
    result = reply.json()["result"]
    assert isinstance(result, list) and all(isinstance(hits, list) and hits for hits in result)


def check_command(argv: list[str]) -> None:
    prog = Path(argv[0]).name
    if prog == "agent-r1":
        check_agent_r1(argv[1:])
    elif prog in ("python", "python3"):
        check_module(argv[2], argv[3:]) if argv[1] == "-m" else check_script(argv[1], argv[2:])
    elif prog == "bash":
        assert argv[1].startswith("scripts/") and (ROOT / argv[1]).is_file(), f"no script {argv[1]}"
    elif prog == "pip":
        check_pip(argv[1:])
    elif prog == "accelerate":
        check_accelerate(argv[1:])
    elif prog == "curl":
        send_curl(argv[1:])
    elif prog == "tensorboard":
        assert (Path(sys.executable).parent / "tensorboard").is_file(), (
            "tensorboard is not installed with the train extra"
        )
    else:
        raise AssertionError(f"{prog}: this test does not know how to check it; mark the block")


@pytest.mark.parametrize("page", pages_with("bash"))
def test_bash_commands_parse(page: str, docs_folder: Path):
    checked = 0
    for block in (b for b in BLOCKS if b.page == page and runs(b, "bash")):
        for text, argv in command_lines(block.body):
            try:
                check_command(argv)
            except Exception as err:
                raise AssertionError(f"{block.where}: {text}\n{type(err).__name__}: {err}") from err
            checked += 1
    assert checked


# ------------------------------------------------------------------------------------------------ console


def console_sessions(body: str) -> list[tuple[str, list[str]]]:
    """The ``$ command`` lines of a console block, each with the output lines below it."""
    sessions: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            sessions.append((line[2:], []))
        else:
            assert sessions, f"output before any $ command: {line!r}"
            sessions[-1][1].append(line)
    return sessions


@pytest.mark.parametrize("page", pages_with("console"))
def test_console_commands_print_what_the_docs_show(page: str, docs_folder: Path, capsys: pytest.CaptureFixture):
    import torch

    from agent_trainers.pipeline.cli import main

    for block in (b for b in BLOCKS if b.page == page and runs(b, "console")):
        for command, expected in console_sessions(block.body):
            if "without a GPU" in command and torch.cuda.is_available():
                continue  # the page shows what a machine without one prints
            argv = shlex.split(command, comments=True)
            assert argv[0] == "agent-r1", f"{block.where}: only agent-r1 sessions are run ({command})"
            main(argv[1:])
            printed = capsys.readouterr()
            assert (printed.out + printed.err).strip().splitlines() == expected, f"{block.where}: $ {command}"


# ------------------------------------------------------------------------------------------------ yaml


@pytest.mark.parametrize("page", pages_with("yaml"))
def test_yaml_blocks_are_valid_config_sections(page: str):
    import yaml

    from agent_trainers.pipeline.config import dotted_settings, load_config

    for block in (b for b in BLOCKS if b.page == page and runs(b, "yaml")):
        config = load_config(ROOT / "configs" / "tiny.yaml", dotted_settings(yaml.safe_load(block.body)))
        for key, value in dotted_settings(yaml.safe_load(block.body)).items():
            got = operator.attrgetter(key)(config)
            assert got == value or str(got) == str(value), f"{block.where}: {key} is {got!r}, the page says {value!r}"
