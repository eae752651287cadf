"""Environments in Ray actors, for tool-latency-bound or CPU-heavy envs: :class:`RayEnvPool` (extra ``ray``).

The rollout engine keeps generating where the model is; only the envs move.
Each actor of the pool holds many envs (made there with ``gymnasium.make``
from the same id and keyword arguments, so their wrapper stack is the one an
in-process env has) and answers ``reset`` / ``step`` / ``close`` calls for
them. The engine's thread pool issues one remote call per env step and waits
for it, with the usual per-step time-out, so trajectories are the same as
in-process ones for the same seeds (``tests/agent_trainers/rollout/test_ray_pool.py``
checks equality):

>>> import ray
>>> from agent_trainers.rollout import rollout
>>> ray.init(num_cpus=2)  # doctest: +SKIP
>>> with RayEnvPool(num_actors=2) as pool:  # doctest: +SKIP
...     trajs = rollout(policy, "AgentR1/HotpotQA-v0", task_indices=[0, 1], group_size=4, make_env=pool.make)

When to use it: an env whose steps hold the GIL (pure-Python tools,
parsing, simulators) runs in parallel only in separate processes; in-process
threads already overlap tools that wait (I/O, ``time.sleep``). ``benchmarks/rollout.py
--ray`` measures both kinds. Envs can also be shipped live (:meth:`RayEnvPool.put`):
they pickle mid-episode and continue identically (``agent_gym.testing.check_copies``).
Everything that crosses to an actor - keyword arguments, actions, step
results - is pickled by Ray. An actor that dies (``kill -9``, out of memory)
ends the episodes of its envs as ``env_error`` (the step's ``ActorDiedError``);
the episodes on other actors come back whole.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

__all__ = ["RayEnvPool", "RemoteDescription", "RemoteEnv", "shared_pool"]


@dataclass(frozen=True)
class _Parser:
    tags: tuple[str, ...] | None


@dataclass(frozen=True)
class RemoteDescription:
    """What the engine reads off ``env.unwrapped`` (the action format), copied from the remote env.

    Attributes:
        parser: Its action parser's ``tags`` (``None`` for the ``tool_call`` format).
        action_format: The env's ``action_format``.
        context: The name of its context policy (``"append"``, ``"window"``, ...).
    """

    parser: _Parser
    action_format: str
    context: str = "append"


def _describe(env: gym.Env) -> dict[str, Any]:
    base = env.unwrapped
    tags = getattr(getattr(base, "parser", None), "tags", None)
    return {
        "spec": env.spec,
        "description": RemoteDescription(
            _Parser(tuple(tags) if tags else None),
            str(getattr(base, "action_format", "tool_call")),
            str(getattr(getattr(base, "context", None), "name", "append")),
        ),
        "observation_space": env.observation_space,
        "action_space": env.action_space,
    }


class _EnvHost:
    """The actor: envs by key (made by ``gymnasium.make`` or shipped in), stepped on request."""

    def __init__(self, setup: Any = None) -> None:
        import agent_gym  # noqa: F401  (registers the environment ids in the actor's process)

        if setup is not None:
            setup()
        self.envs: dict[int, gym.Env] = {}

    def ready(self) -> bool:
        return True

    def make(self, key: int, env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        self.envs[key] = gym.make(env_id, **kwargs)
        return _describe(self.envs[key])

    def put(self, key: int, env: gym.Env) -> dict[str, Any]:
        self.envs[key] = env
        return _describe(env)

    def reset(self, key: int, seed: int | None, options: dict[str, Any] | None) -> Any:
        return self.envs[key].reset(seed=seed, options=options)

    def step(self, key: int, action: Any) -> Any:
        return self.envs[key].step(action)

    def close(self, key: int) -> None:
        env = self.envs.pop(key, None)
        if env is not None:
            env.close()

    def size(self) -> int:
        return len(self.envs)


class RemoteEnv:
    """An env living in a :class:`RayEnvPool` actor: the part of ``gymnasium.Env`` the rollout engine uses.

    ``reset``, ``step`` and ``close`` are remote calls that block until the actor
    answers. ``unwrapped`` is a local :class:`RemoteDescription` (the action
    format), ``spec`` and the spaces are copies of the remote env's.
    """

    def __init__(self, host: Any, key: int, described: dict[str, Any]) -> None:
        import ray

        self._ray, self._host, self.key = ray, host, key
        self.spec = described["spec"]
        self.observation_space, self.action_space = described["observation_space"], described["action_space"]
        self._description: RemoteDescription = described["description"]
        self.closed = False

    @property
    def unwrapped(self) -> RemoteDescription:
        """The remote env's action format (what :func:`~agent_trainers.rollout.stop_strings_for` reads)."""
        return self._description

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        """``env.reset`` in the actor."""
        return self._ray.get(self._host.reset.remote(self.key, seed, options))

    def step(self, action: Any) -> Any:
        """``env.step`` in the actor."""
        return self._ray.get(self._host.step.remote(self.key, action))

    def close(self, timeout_s: float = 10.0) -> None:
        """Close and drop the env in its actor (idempotent). An actor that died (its envs went with it) or that
        does not answer within ``timeout_s`` is not an error: there is nothing left to free, and a rollout's
        clean-up must not lose the trajectories it already has."""
        if not self.closed:
            self.closed = True
            try:
                self._ray.get(self._host.close.remote(self.key), timeout=timeout_s)
            except (self._ray.exceptions.RayError, self._ray.exceptions.GetTimeoutError) as exc:
                warnings.warn(f"env {self.key}: its Ray actor could not close it ({type(exc).__name__})", stacklevel=2)


class RayEnvPool:
    """A pool of Ray actors holding envs; :meth:`make` is a drop-in for ``gymnasium.make`` in :func:`rollout`.

    Envs go to the actors in turn (env ``k`` to actor ``k % num_actors``), so
    the G episodes of a group spread over the actors. Ray must be initialised
    (``ray.init(...)``) or it starts a local instance on first use.

    Args:
        num_actors: Actors (processes) to start.
        max_concurrency: Env calls one actor runs at once on its own threads
            (more than 1 overlaps waiting tools inside an actor; GIL-bound steps
            gain only from more actors). A step that hangs holds one thread until
            it returns (the engine's time-out ends its episode, but cannot stop the
            call); with 1 thread it would hold up every other env of that actor,
            hence the default 8.
        num_cpus_per_actor: CPUs Ray reserves per actor. 0 (the default) lets
            any number of actors share the node; with 1, actors beyond the
            cluster's CPUs are never scheduled and :meth:`make` fails after
            ``ready_timeout_s``.
        setup: Called once in each actor before any env is made (e.g. to
            register your own env ids there); it is pickled by Ray.
        ready_timeout_s: How long to wait for the actors to start.

    Raises:
        ImportError: Ray is not installed (``pip install 'agent-r1-gym[ray]'``).
    """

    def __init__(
        self,
        num_actors: int = 2,
        *,
        max_concurrency: int = 8,
        num_cpus_per_actor: float = 0.0,
        setup: Any = None,
        ready_timeout_s: float = 120.0,
    ) -> None:
        if num_actors < 1 or max_concurrency < 1 or num_cpus_per_actor < 0:
            raise ValueError(
                "num_actors and max_concurrency must be >= 1, num_cpus_per_actor >= 0 "
                f"(got {num_actors}, {max_concurrency}, {num_cpus_per_actor})"
            )
        try:
            import ray
        except ImportError as exc:
            raise ImportError("RayEnvPool needs Ray: pip install 'agent-r1-gym[ray]' (ray==2.60.0)") from exc
        self._ray = ray
        actor = ray.remote(_EnvHost).options(max_concurrency=max_concurrency, num_cpus=num_cpus_per_actor)
        # Ray types a handle's methods as _EnvHost's plain ones: their .remote() exists at run time only
        self.hosts: list[Any] = [actor.remote(setup) for _ in range(num_actors)]
        self._keys = itertools.count()
        self._ready_timeout_s, self._ready = ready_timeout_s, False

    def _host(self, key: int) -> Any:
        if not self._ready:
            waiting = [h.ready.remote() for h in self.hosts]
            done, _ = self._ray.wait(waiting, num_returns=len(waiting), timeout=self._ready_timeout_s)
            if len(done) < len(waiting):
                cpus = self._ray.cluster_resources().get("CPU", 0)
                raise RuntimeError(
                    f"{len(waiting) - len(done)} of {len(waiting)} Ray actors did not start within "
                    f"{self._ready_timeout_s} s (the cluster has {cpus:g} CPUs; lower num_cpus_per_actor)"
                )
            self._ray.get(done)  # an actor whose setup failed raises here
            self._ready = True
        return self.hosts[key % len(self.hosts)]

    def make(self, env_id: str, **kwargs: Any) -> RemoteEnv:
        """``gymnasium.make(env_id, **kwargs)`` in the next actor; the keyword arguments must pickle."""
        key = next(self._keys)
        host = self._host(key)
        return RemoteEnv(host, key, self._ray.get(host.make.remote(key, env_id, dict(kwargs))))

    def put(self, env: gym.Env) -> RemoteEnv:
        """Ship a live env (pickled, in whatever state it is) to the next actor."""
        key = next(self._keys)
        host = self._host(key)
        return RemoteEnv(host, key, self._ray.get(host.put.remote(key, env)))

    def sizes(self) -> list[int]:
        """Envs held by each actor (closed ones are dropped)."""
        return self._ray.get([h.size.remote() for h in self.hosts])

    def shutdown(self) -> None:
        """Kill the actors (their envs go with them)."""
        for host in self.hosts:
            self._ray.kill(host)
        self.hosts = []

    def __enter__(self) -> RayEnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


_SHARED: dict[int, RayEnvPool] = {}


def shared_pool(num_actors: int) -> RayEnvPool:
    """This process's pool of ``num_actors`` actors (``RolloutConfig.env_actors``), started on first use.

    It lives until the process ends (Ray ends the actors with their driver). If
    Ray is not initialised, a local instance is started with the machine's CPUs.
    """
    if num_actors not in _SHARED:
        import ray

        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        _SHARED[num_actors] = RayEnvPool(num_actors)
    return _SHARED[num_actors]
