"""Adapter overhead: the same episodes played natively and through SkyRL-gym, OpenEnv and verifiers.

For each environment id, the env's oracle plays ``episodes`` episodes once on
the plain Gymnasium env to fix the actions; every adapter then replays exactly
those actions on the same tasks and seeds, and the time per step is measured:

* ``native`` - ``env.step(action)`` on the env as ``gymnasium.make`` returns it
  (the reference, measured in the same run);
* ``skyrl`` - ``env.step(action)`` on ``skyrl_gym.make(id, ...)`` (in process);
* ``openenv`` - ``client.step(AgentGymAction(text=action))`` from OpenEnv's
  sync client to a server in a separate process (WebSocket round trip included);
* ``verifiers`` - one model turn of ``run_eval`` (verifiers' interception server,
  eval client and trace, our in-process harness and env step) against a
  scripted model server replaying the same actions. Its reference also
  subtracts a direct request to that scripted server, so the reported overhead
  is what verifiers plus the adapter add per turn. Per-episode fixed costs
  (runtime, scoring, trace) are reported separately as ms/episode.

The peer comparison plays the same HotpotQA search/answer actions (our
oracle's, in Search-R1 tags) on SkyRL-gym's own ``SearchEnv`` and on our
``AgentR1/HotpotQA-v0`` with ``retriever="remote"`` (``RemoteRetriever``), both
searching one ``python -m agent_gym.retrieval.server`` process over the same
paragraphs (top-3, pooled), and reports steps/s for each.

Usage:
    python benchmarks/integrations.py                          # every env, every installed adapter
    python benchmarks/integrations.py --env-ids AgentR1/HotpotQA-v0 --episodes 50 --adapters native skyrl
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import httpx
import tyro
from tqdm import tqdm

import agent_gym
from agent_gym.envs import REGISTRY

SHARED_HOTPOTQA = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa" / "dev_distractor_sample_a_300.jsonl"
)
ADAPTERS = ("native", "skyrl", "openenv", "verifiers")
REQUIRES = {"skyrl": "skyrl_gym", "openenv": "openenv", "verifiers": "verifiers"}


@dataclass
class Args:
    """Benchmark settings."""

    env_ids: list[str] = field(default_factory=list)
    """Environment ids to measure (default: every registered id)."""
    episodes: int = 20
    """Episodes per environment: tasks ``0 .. episodes-1``, one each."""
    seed: int = 0
    """Episode seed (the same for every task, as a verifiers taskset seeds them)."""
    adapters: list[str] = field(default_factory=lambda: list(ADAPTERS))
    """Which adapters to time (those whose framework is not installed are skipped)."""
    peer: bool = True
    """Run the peer comparison (needs skyrl-gym and the ``server`` extra)."""
    peer_episodes: int = 100
    """HotpotQA episodes in the peer comparison."""
    peer_data: str = ""
    """HotpotQA file for the peer comparison (default: the shared dev sample A)."""
    retrieval_url: str = ""
    """Use this running ``/retrieve`` server (indexing ``peer_data``) instead of starting one."""


@dataclass
class Episode:
    """One fixed episode: task, seed and the oracle's actions."""

    task_index: int
    seed: int
    actions: list[str]


@dataclass
class Timing:
    """Seconds spent stepping, steps taken and episodes played by one adapter."""

    seconds: float = 0.0
    steps: int = 0
    episodes: int = 0
    episode_seconds: float = 0.0

    @property
    def ms_per_step(self) -> float:
        return 1000 * self.seconds / max(self.steps, 1)


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def oracle_episodes(env_id: str, args: Args) -> list[Episode]:
    env = gym.make(env_id)
    n = env.unwrapped.num_tasks()
    episodes = []
    for i in range(args.episodes):
        env.reset(seed=args.seed, options={"task_index": i % n})
        actions, done = [], False
        while not done:
            actions.append(env.unwrapped.oracle_action())
            _, _, terminated, truncated, _ = env.step(actions[-1])
            done = terminated or truncated
        episodes.append(Episode(i % n, args.seed, actions))
    return episodes


def time_native(env_id: str, episodes: list[Episode], bar: tqdm) -> Timing:
    env, timing = gym.make(env_id), Timing()
    for ep in episodes:
        start_episode = time.perf_counter()
        env.reset(seed=ep.seed, options={"task_index": ep.task_index})
        for action in ep.actions:
            start = time.perf_counter()
            env.step(action)
            timing.seconds += time.perf_counter() - start
        timing.steps += len(ep.actions)
        timing.episodes += 1
        timing.episode_seconds += time.perf_counter() - start_episode
        bar.update(1)
    return timing


def time_skyrl(env_id: str, episodes: list[Episode], bar: tqdm) -> Timing:
    import skyrl_gym

    from agent_gym.integrations.skyrl import register_skyrl_env

    register_skyrl_env(env_id)
    timing = Timing()
    for ep in episodes:
        start_episode = time.perf_counter()
        env = skyrl_gym.make(env_id, env_config={}, extras={"task_index": ep.task_index, "seed": ep.seed})
        env.init([])
        for action in ep.actions:
            start = time.perf_counter()
            env.step(action)
            timing.seconds += time.perf_counter() - start
        env.get_metrics()
        env.close()
        timing.steps += len(ep.actions)
        timing.episodes += 1
        timing.episode_seconds += time.perf_counter() - start_episode
        bar.update(1)
    return timing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _process(command: list[str], health_url: str) -> Iterator[subprocess.Popen]:
    """Run ``command`` until ``health_url`` answers 200; terminate it on exit."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(health_url, timeout=1).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{command[2]} did not start: {process.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextlib.contextmanager
def openenv_server_process(env_id: str) -> Iterator[str]:
    """``python -m agent_gym.integrations.openenv`` in its own process; yields its URL."""
    port = _free_port()
    command = [sys.executable, "-m", "agent_gym.integrations.openenv", env_id, "--port", str(port)]
    with _process(command, f"http://127.0.0.1:{port}/health"):
        yield f"http://127.0.0.1:{port}"


def time_openenv(env_id: str, episodes: list[Episode], bar: tqdm) -> Timing:
    from agent_gym.integrations.openenv import AgentGymAction, AgentGymClient

    timing = Timing()
    with openenv_server_process(env_id) as url, AgentGymClient(base_url=url).sync() as client:
        for ep in episodes:
            start_episode = time.perf_counter()
            client.reset(seed=ep.seed, task_index=ep.task_index)
            for action in ep.actions:
                start = time.perf_counter()
                client.step(AgentGymAction(text=action))
                timing.seconds += time.perf_counter() - start
            timing.steps += len(ep.actions)
            timing.episodes += 1
            timing.episode_seconds += time.perf_counter() - start_episode
            bar.update(1)
    return timing


def time_verifiers(env_id: str, episodes: list[Episode], bar: tqdm) -> tuple[Timing, float]:
    """Per-turn time of one sequential ``run_eval`` over all episodes, and a direct request's time."""
    import logging

    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    from agent_gym.integrations.scripted import background_uvicorn, make_chat_app

    logging.getLogger("verifiers").setLevel(logging.WARNING)
    scripts = {_question(env_id, ep): ep.actions for ep in episodes}

    def policy(messages, tools):
        actions = scripts[messages[1]["content"]]
        return {"content": actions[sum(1 for m in messages if m.get("role") == "assistant")], "tool_calls": []}

    timing = Timing()
    with background_uvicorn(make_chat_app(policy)) as url:
        config = EvalConfig.model_validate(
            {
                "env": {
                    "taskset": {"id": "agent-r1-gym", "env_id": env_id, "seed": episodes[0].seed,
                                "task_indices": [ep.task_index for ep in episodes]},
                    "agent": {"harness": {"native_tools": False}},
                },
                "model": "scripted", "client": {"base_url": f"{url}/v1", "api_key_var": "SCRIPTED_MODEL_KEY"},
                "max_concurrent": 1, "push": False, "rich": None, "output_dir": "runs/bench_integrations",
                "clean": True,
            }
        )  # fmt: skip
        start = time.perf_counter()
        results = asyncio.run(run_eval(config))
        timing.episode_seconds = time.perf_counter() - start
        for episode in results:
            (trace,) = episode.traces
            if not trace.ok or trace.num_turns != len(scripts[trace.task.data.prompt]):
                raise RuntimeError(f"verifiers episode failed or diverged: {trace.errors}")
            timing.seconds += trace.timing.agent.duration
            timing.steps += trace.num_turns
            timing.episodes += 1
            bar.update(1)
        direct = []
        with httpx.Client() as http:
            for question, actions in scripts.items():
                request = {"model": "scripted", "messages": [{"role": "system", "content": ""},
                                                             {"role": "user", "content": question}]}  # fmt: skip
                for _ in actions:
                    t0 = time.perf_counter()
                    http.post(f"{url}/v1/chat/completions", json=request).raise_for_status()
                    direct.append(time.perf_counter() - t0)
    return timing, 1000 * sum(direct) / max(len(direct), 1)


def _question(env_id: str, ep: Episode) -> str:
    env = gym.make(env_id)
    _, info = env.reset(seed=ep.seed, options={"task_index": ep.task_index})
    return info["messages"][1]["content"]


@contextlib.contextmanager
def retrieval_server_process(qa_data: str) -> Iterator[str]:
    """``python -m agent_gym.retrieval.server --qa-data FILE`` in its own process; yields its /retrieve URL."""
    port = _free_port()
    command = [sys.executable, "-m", "agent_gym.retrieval.server", "--qa-data", qa_data, "--port", str(port),
               "--log-level", "warning"]  # fmt: skip
    with _process(command, f"http://127.0.0.1:{port}/health") as _:
        yield f"http://127.0.0.1:{port}/retrieve"


def peer_comparison(args: Args) -> None:
    """SkyRL-gym's own SearchEnv vs our HotpotQA env: the same search/answer actions, one /retrieve server."""
    from skyrl_gym.envs.search.env import SearchEnv, SearchEnvConfig

    data = args.peer_data or str(SHARED_HOTPOTQA)
    if not Path(data).is_file():
        print(f"\npeer comparison: skipped ({data} not found; pass --peer-data a HotpotQA file)")
        return
    with contextlib.ExitStack() as stack:
        url = args.retrieval_url or stack.enter_context(retrieval_server_process(data))
        # SkyRL-gym's SearchEnv posts {"query": q}; the server takes that form as well as Search-R1's "queries"
        ours = gym.make("AgentR1/HotpotQA-v0", data_path=data, corpus="pooled", retriever="remote",
                        retriever_url=url, action_format="tags", top_k=3)  # fmt: skip
        episodes = []
        for i in range(min(args.peer_episodes, ours.unwrapped.num_tasks())):
            ours.reset(seed=args.seed, options={"task_index": i})
            actions, done = [], False
            while not done:
                actions.append(ours.unwrapped.oracle_action())
                _, _, terminated, truncated, _ = ours.step(actions[-1])
                done = terminated or truncated
            episodes.append((i, actions, list(ours.unwrapped.state.task.answers)))
        timings = {"AgentR1/HotpotQA-v0 (RemoteRetriever)": Timing(), "skyrl SearchEnv": Timing()}
        ours_t, theirs_t = timings.values()
        for i, actions, answers in tqdm(episodes, desc="peer episodes", unit="ep"):
            ours.reset(seed=args.seed, options={"task_index": i})
            for action in actions:
                start = time.perf_counter()
                ours.step(action)
                ours_t.seconds += time.perf_counter() - start
            extras = {"reward_spec": {"ground_truth": {"target": answers}}, "max_turns": len(actions) + 1}
            theirs = SearchEnv(SearchEnvConfig(search_url=url, topk=3, log_requests=False), extras)
            theirs.init([{"role": "user", "content": "question"}])
            for action in actions:
                start = time.perf_counter()
                out = theirs.step(action)
                theirs_t.seconds += time.perf_counter() - start
                if "Search error" in str(out["observations"]):
                    raise RuntimeError(f"SearchEnv's search failed: {out['observations']}")
            ours_t.steps += len(actions)
            theirs_t.steps += len(actions)
    searches = sum(a.startswith("<search>") for _, actions, _ in episodes for a in actions)
    print(f"\npeer comparison: {len(episodes)} HotpotQA episodes from {Path(data).name}, {ours_t.steps} steps "
          f"({searches} searches, top-3 over one /retrieve server, pooled paragraphs)")  # fmt: skip
    for name, timing in timings.items():
        print(f"  {name:<40}{1000 / max(timing.ms_per_step, 1e-9):>9.1f} steps/s{timing.ms_per_step:>9.3f} ms/step")
    print(f"  ratio (ours / SearchEnv steps/s): {theirs_t.ms_per_step / ours_t.ms_per_step:.2f}")


def main() -> None:
    args = parse_args()
    assert agent_gym  # registers the ids
    env_ids = args.env_ids or [entry.id for entry in REGISTRY]
    adapters = [a for a in args.adapters if a == "native" or importlib.util.find_spec(REQUIRES[a]) is not None]
    skipped = sorted(set(args.adapters) - set(adapters))
    print(
        f"episodes per env: {args.episodes}; adapters: {adapters}" + (f"; not installed: {skipped}" if skipped else "")
    )
    rows = []
    total = len(env_ids) * len(adapters) * args.episodes
    with tqdm(total=total, desc="episodes", unit="ep") as bar:
        for env_id in env_ids:
            episodes = oracle_episodes(env_id, args)
            time_native(env_id, episodes[:2], tqdm(disable=True))  # warm caches (index, validators) untimed
            native = time_native(env_id, episodes, bar)
            for adapter in adapters[1:] if adapters[0] == "native" else adapters:
                direct_ms = 0.0
                if adapter == "verifiers":
                    timing, direct_ms = time_verifiers(env_id, episodes, bar)
                else:
                    timing = {"skyrl": time_skyrl, "openenv": time_openenv}[adapter](env_id, episodes, bar)
                rows.append((env_id, adapter, native, timing, direct_ms))
    print(f"\n{'env':<28}{'adapter':<11}{'ms/step':>9}{'native':>9}{'ref':>9}{'overhead':>10}{'ratio':>8}"
          f"{'ms/episode':>12}")  # fmt: skip
    for env_id, adapter, native, timing, direct_ms in rows:
        reference = native.ms_per_step + direct_ms
        print(
            f"{env_id:<28}{adapter:<11}{timing.ms_per_step:>9.3f}{native.ms_per_step:>9.3f}{reference:>9.3f}"
            f"{timing.ms_per_step - reference:>10.3f}{timing.ms_per_step / reference:>8.2f}"
            f"{1000 * timing.episode_seconds / max(timing.episodes, 1):>12.1f}"
        )
    print("ref = native env step (+ a direct request to the scripted model for verifiers); overhead = ms/step - ref")
    if args.peer and importlib.util.find_spec("skyrl_gym") and importlib.util.find_spec("fastapi"):
        peer_comparison(args)


if __name__ == "__main__":
    main()
