"""Config files: where a config named on the command line is found, and how its text is read with bounds.

A config is small (``configs/*.yaml`` are under 4 kB and 4 levels deep), but the text may come from anywhere: a
path that is a device or a FIFO, a file of gigabytes, a YAML document of nested aliases that expands to millions of
values, a document nested thousands deep. Each is refused here in one line, before anything walks the data
(:func:`read_config_text`, :func:`parse_config_text`, :func:`load_yaml`). What the settings mean is
:mod:`agent_trainers.pipeline.config`'s.
"""

from __future__ import annotations

import stat
import tomllib
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_YAML_VALUES",
    "PACKAGED_CONFIGS",
    "YAMLTooLarge",
    "check_size",
    "find_config",
    "load_yaml",
    "packaged_configs",
    "parse_config_text",
    "read_config_text",
]


MAX_YAML_VALUES = 100_000
"""The most values a YAML config may expand to (aliases counted each time they are used)."""

MAX_CONFIG_DEPTH = 32
"""The deepest nesting of sections and values a config may have (``configs/*.yaml`` use 4)."""

MAX_CONFIG_BYTES = 1_000_000
"""The largest config file read (``configs/*.yaml`` are under 4 kB)."""


class YAMLTooLarge(ValueError):
    """A YAML document expands to more than :data:`MAX_YAML_VALUES` values, or nests deeper than
    :data:`MAX_CONFIG_DEPTH`."""


def load_yaml(text: str, source: str = "the YAML text") -> Any:
    """``yaml.safe_load`` bounded: the document may nest at most :data:`MAX_CONFIG_DEPTH` deep and expand to at
    most :data:`MAX_YAML_VALUES` values.

    A 1,344-byte document of nested aliases (``&a [*b, *b, ...]``) expands to 10^6 values and more; every
    later walk of it (validation, writing ``config.yaml``) would take minutes and gigabytes. A document nested
    5,000 deep exhausts the loader's recursion (it is refused from the parser's events, before loading).

    Raises:
        ValueError: One line: not YAML (or a tag such as ``!!python/object``, which safe loading refuses).
        YAMLTooLarge: Too deep, or too many values (a ``ValueError`` too).
    """
    try:
        _check_yaml_depth(text, source)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{source} is not valid YAML: {' '.join(str(exc).split())}") from None
    check_size(data, source, aliases=True)
    return data


def _check_yaml_depth(text: str, source: str) -> None:
    """Refuse a YAML document nested deeper than :data:`MAX_CONFIG_DEPTH` from the parser's events (the parser
    keeps a stack, the loader recurses)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_CONFIG_DEPTH:
                raise YAMLTooLarge(f"{source} nests deeper than {MAX_CONFIG_DEPTH} levels; a config is far flatter")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def check_size(data: Any, source: str, *, aliases: bool = False) -> None:
    """Refuse parsed config data nested deeper than :data:`MAX_CONFIG_DEPTH` or holding more than
    :data:`MAX_YAML_VALUES` values (walked without recursion)."""
    count, stack = 0, [(data, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_YAML_VALUES:
            why = " (YAML aliases repeat what they name)" if aliases else ""
            raise YAMLTooLarge(
                f"{source} expands to more than {MAX_YAML_VALUES:,} values{why}; a config is far smaller"
            )
        if depth > MAX_CONFIG_DEPTH:
            raise YAMLTooLarge(f"{source} nests deeper than {MAX_CONFIG_DEPTH} levels; a config is far flatter")
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in (*node.keys(), *node.values()))
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)


PACKAGED_CONFIGS = Path(__file__).resolve().parents[1] / "configs"
"""The configs shipped in the package (``agent_trainers/configs``; the repository's ``configs/*.yaml`` link there),
so that a pip install has ``agent-r1 train --config tiny``."""


def packaged_configs() -> list[str]:
    """The names ``--config`` takes besides a path: the packaged configs, without ``.yaml``."""
    return sorted(p.stem for p in PACKAGED_CONFIGS.glob("*.yaml"))


def find_config(path: str | Path) -> Path:
    """``path`` when that file exists, else the packaged config of that name.

    A bare name takes the packaged config (``tiny``, ``tiny.yaml``). A path whose file does not exist but
    whose file name is a packaged config's (``configs/tiny.yaml`` after a pip install, which has no
    ``configs/`` folder) takes that packaged config too, and says so in one line on stderr.

    Raises:
        FileNotFoundError: Neither exists; the message lists the packaged names.
    """
    import sys  # here, not at the top: only this fallback prints

    given = Path(path)
    if given.exists() or given.is_symlink():
        return given
    if given.parent == Path(".") and given.suffix in ("", ".yaml"):
        packaged = PACKAGED_CONFIGS / f"{given.stem}.yaml"
        if packaged.is_file():
            return packaged
    elif given.suffix == ".yaml" and (PACKAGED_CONFIGS / given.name).is_file():
        packaged = PACKAGED_CONFIGS / given.name
        print(
            f"config: {str(path)!r} does not exist here; using the packaged {given.name} ({packaged})", file=sys.stderr
        )
        return packaged
    raise FileNotFoundError(
        f"no config file {str(path)!r} (and no packaged config of that name: {', '.join(packaged_configs())})"
    )


def read_config_text(path: Path) -> str:
    """The text of a config file, read with bounds: the suffix is checked first, then that it is a regular file
    (not a folder, a device such as ``/dev/zero`` or a FIFO, which would never end) of at most
    :data:`MAX_CONFIG_BYTES`, in UTF-8.

    Raises:
        ValueError: One line naming the file and what is wrong.
    """
    if path.suffix not in (".yaml", ".yml", ".toml"):
        raise ValueError(f"config file must end in .yaml, .yml or .toml (got {path.name!r})")
    try:
        info = path.stat()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{path} is a folder, not a config file")
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path} is not a regular file (a device, FIFO or socket); a config is a file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"{path} holds {info.st_size:,} bytes, more than a config's {MAX_CONFIG_BYTES:,}")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)  # the file may have grown since stat
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{path} holds more than a config's {MAX_CONFIG_BYTES:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (byte {exc.start})") from None


def parse_config_text(path: Path, text: str) -> Any:
    """The data of a config file's text: TOML for a ``.toml`` file, YAML otherwise (through :func:`load_yaml`),
    bounded as :func:`load_yaml` bounds YAML; an empty YAML file is ``{}``.

    Raises:
        ValueError: One line: not valid TOML or YAML.
        YAMLTooLarge: Too deep, or too many values.
    """
    if path.suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path} is not valid TOML: {exc}") from None
        except RecursionError:
            raise YAMLTooLarge(f"{path} nests deeper than {MAX_CONFIG_DEPTH} levels; a config is far flatter") from None
        check_size(data, str(path))
        return data
    return load_yaml(text, str(path)) or {}
