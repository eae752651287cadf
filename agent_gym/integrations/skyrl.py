"""SkyRL-gym adapter: any ToolEnv as a ``skyrl_gym`` ``BaseTextEnv``.

SkyRL's generators create one env per trajectory with
``skyrl_gym.make(env_class, env_config=..., extras=row_extras)``, call
``env.init(prompt)`` for the opening chat messages, then ``env.step(text)``
until ``done``, and finally ``env.get_metrics()`` and ``env.close()``.
:class:`AgentGymTextEnv` answers each of those from our env:

* ``init`` resets the env on the row's ``task_index`` (or ``task_id``) and
  ``seed`` and returns the env's own system and user messages (the dataset
  prompt is replaced: our env owns its prompt; rows made by
  :func:`skyrl_dataset_rows` carry the same messages anyway);
* ``step`` runs the model's text through the env; tool results come back as
  one user message (``observation_style="user"``, the default) or as the env's
  own ``tool``/``user`` messages (``"tool"``); ``reward`` is the env's per-step
  rubric reward, which SkyRL places at that turn's last token;
* ``done`` is the env's ``terminated or truncated``, or SkyRL's own
  ``extras["max_turns"]`` running out, whichever comes first; the reason is in
  ``metadata["stop_reason"]``;
* ``get_metrics`` returns the env's episode metrics, the episode return and
  each rubric term's weighted total (``reward/<term>``).

Example:
    >>> import skyrl_gym
    >>> "AgentR1/HotpotQA-v0" in register_skyrl_envs()
    True
    >>> env = skyrl_gym.make("AgentR1/HotpotQA-v0", env_config={}, extras={"task_index": 0})
    >>> prompt, _ = env.init([])
    >>> out = env.step('<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

from agent_gym.integrations.session import EnvSession, EnvSource, ObservationStyle, make_tool_env
from agent_gym.registration import STOP_REASON_WRAPPER, import_env_module

__all__ = [
    "ENTRY_POINT",
    "AgentGymEnvConfig",
    "AgentGymTextEnv",
    "agent_gym_env_ids",
    "register_skyrl_env",
    "register_skyrl_envs",
    "skyrl_dataset_rows",
]

ENTRY_POINT = "agent_gym.integrations.skyrl:AgentGymTextEnv"
"""The SkyRL-gym entry point of :class:`AgentGymTextEnv`."""


@dataclass
class AgentGymEnvConfig:
    """The ``env_config`` SkyRL passes to the env (``environment.skyrl_gym.<env_class>`` in its Hydra config).

    Attributes:
        env_kwargs: Keyword arguments for ``gymnasium.make`` (e.g. ``data_path``, ``reward``).
        observation_style: ``"user"`` (tool results in one user message) or
            ``"tool"`` (the env's own ``tool``/``user`` messages).
    """

    env_kwargs: dict[str, Any] = field(default_factory=dict)
    observation_style: str = ObservationStyle.USER.value

    @classmethod
    def coerce(cls, config: Any) -> AgentGymEnvConfig:
        """Accept this dataclass, a mapping or an OmegaConf ``DictConfig`` (``None``: defaults)."""
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        if type(config).__name__ == "DictConfig":
            from omegaconf import OmegaConf

            config = OmegaConf.to_container(config, resolve=True)
        if not isinstance(config, Mapping):
            raise TypeError(f"env_config must be a mapping or AgentGymEnvConfig, got {type(config).__name__}")
        unknown = set(config) - {"env_kwargs", "observation_style", "env_class"}
        if unknown:
            raise ValueError(
                f"unknown env_config keys {sorted(unknown)}; put gymnasium.make arguments under 'env_kwargs'"
            )
        return cls(dict(config.get("env_kwargs") or {}), str(config.get("observation_style", "user")))


class AgentGymTextEnv(BaseTextEnv):
    """A ToolEnv behind SkyRL-gym's ``BaseTextEnv`` interface.

    Args:
        env_config: An :class:`AgentGymEnvConfig` (or mapping / ``DictConfig``).
        extras: The dataset row's extras: ``task_index`` or ``task_id``,
            optional ``seed`` and ``max_turns`` (SkyRL sets it).
        env_id: The env to build: a registered id or a factory (the
            registration helpers bind it).
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None, *, env_id: EnvSource):
        super().__init__()
        config = AgentGymEnvConfig.coerce(env_config)
        extras = dict(extras or {})
        self.session = EnvSession(make_tool_env(env_id, **config.env_kwargs), config.observation_style)
        self.task_index = _optional_int(extras.get("task_index"), "task_index")
        self.task_id = None if extras.get("task_id") is None else str(extras["task_id"])
        self.seed = _optional_int(extras.get("seed"), "seed")
        self.max_turns = _optional_int(extras.get("max_turns"), "max_turns")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"extras['max_turns'] must be >= 1 (got {self.max_turns})")
        self.prompt_replaced = False

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Reset on the row's task; return the env's opening messages and ``{task_id, task_index, tools}``."""
        messages, tools = self.session.reset(seed=self.seed, task_index=self.task_index, task_id=self.task_id)
        self.turns = 0
        self.prompt_replaced = bool(prompt) and list(prompt) != messages
        info = self.session.last_info
        return messages, {"task_id": info["task_id"], "task_index": info["task_index"], "tools": tools}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One env step on the model's text; see the module docstring for ``done`` and the observations."""
        view = self.session.step(action)
        self.turns += 1
        out_of_turns = self.max_turns is not None and self.turns >= self.max_turns
        done = view.done or out_of_turns
        stop_reason = self.session.stop_reason or ("max_turns" if out_of_turns else None)
        metadata = {
            "reward_terms": dict(view.info["reward_terms"]),
            "stop_reason": stop_reason,
            "turn": self.turns,
            "tool_calls": [{"name": c["name"], "ok": c["ok"]} for c in view.info["tool_calls"]],
            "format_errors": list(view.info["format_errors"]),
        }
        observations = [] if done else view.messages
        return BaseTextEnvStepOutput(
            observations=observations, reward=view.reward, done=done, metadata=metadata, postprocessed_action=None
        )

    def get_metrics(self) -> dict[str, Any]:
        """Episode metrics, ``episode_return`` and ``reward/<term>`` weighted totals."""
        metrics: dict[str, Any] = dict(self.session.episode_metrics())
        metrics["episode_return"] = self.session.episode_return
        metrics.update({f"reward/{name}": value for name, value in self.session.weighted_totals().items()})
        return metrics

    def close(self) -> None:
        """Close the wrapped env."""
        self.session.close()


def _optional_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise TypeError(f"extras[{name!r}] must be an integer (got {value!r})")
    return int(value)


def register_skyrl_env(env: EnvSource, skyrl_id: str | None = None) -> str:
    """Register one env with ``skyrl_gym`` (idempotent); returns the SkyRL id.

    Args:
        env: A registered Gymnasium id; a ``module:Namespace/Name-vN`` id, whose module is imported now (also
            from the working directory) and again wherever SkyRL makes the env; or a factory returning a
            ToolEnv (then ``skyrl_id`` is required).
        skyrl_id: The id for ``skyrl_gym.make``; defaults to the Gymnasium id as given.

    Raises:
        ValueError: A factory without ``skyrl_id``, or an id Gymnasium does not know (one line, with
            Gymnasium's "did you mean" or the module that did not import).
    """
    import skyrl_gym

    if skyrl_id is None:
        if not isinstance(env, str):
            raise ValueError("register_skyrl_env needs skyrl_id when env is a factory")
        skyrl_id = env
    if isinstance(env, str):
        try:
            gym.spec(import_env_module(env))
        except (gym.error.Error, ImportError) as exc:
            raise ValueError(f"register_skyrl_env: {env!r}: {' '.join(str(exc).split())}") from None
    if skyrl_id not in skyrl_gym.registry:
        skyrl_gym.register(id=skyrl_id, entry_point=ENTRY_POINT, kwargs={"env_id": env})
    return skyrl_id


def agent_gym_env_ids() -> list[str]:
    """Every id registered the way the built-ins are: the ``AgentR1/*`` ids, then the ids registered with
    :func:`agent_gym.register_env` in this process (your own, once their module is imported)."""
    from agent_gym.envs import REGISTRY

    built_in = [entry.id for entry in REGISTRY]
    own = [
        env_id
        for env_id, spec in gym.registry.items()
        if env_id not in built_in and STOP_REASON_WRAPPER in spec.additional_wrappers
    ]
    return built_in + own


def register_skyrl_envs(env_ids: Iterable[str] | None = None) -> list[str]:
    """Register envs with ``skyrl_gym``; returns their SkyRL ids.

    Args:
        env_ids: The ids to register (registered Gymnasium ids, or ``module:Namespace/Name-vN``); by default
            every id of :func:`agent_gym_env_ids`: the ``AgentR1/*`` ids and those registered with
            :func:`agent_gym.register_env` so far (import your env's module first). An id registered with
            plain ``gymnasium.register`` is registered when named here.
    """
    ids = list(env_ids) if env_ids is not None else agent_gym_env_ids()
    return [register_skyrl_env(env_id) for env_id in ids]


def skyrl_dataset_rows(
    env_id: str, task_indices: Iterable[int], *, env_kwargs: Mapping[str, Any] | None = None, data_source: str = ""
) -> list[dict[str, Any]]:
    """Rows in SkyRL's dataset layout (``prompt``, ``env_class``, extras) for the given tasks.

    ``prompt`` is the env's opening messages for that task, so SkyRL's prompt
    filtering and length checks see what the model will see. ``env_id`` is
    registered with ``skyrl_gym`` too (:func:`register_skyrl_env`), so that
    ``skyrl_gym.make(row["env_class"], ...)`` works in this process.
    """
    register_skyrl_env(env_id)
    session = EnvSession(make_tool_env(env_id, **dict(env_kwargs or {})))
    rows = []
    for index in task_indices:
        messages, _ = session.reset(seed=0, task_index=int(index))
        task_id = session.last_info["task_id"]
        rows.append(
            {
                "data_source": data_source or env_id,
                "prompt": messages,
                "env_class": env_id,
                "task_index": int(index),
                "task_id": task_id,
            }
        )
    session.close()
    return rows
