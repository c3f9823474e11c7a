"""The engine's ``ec_transfer_config``, checked exactly as the library does."""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Union

from . import _lib

ConfigLike = Union[str, bytes, Mapping[str, Any]]


def config_text(config: ConfigLike) -> bytes:
    """The JSON text of a config given as text or as a mapping."""
    if isinstance(config, bytes):
        return config
    if isinstance(config, str):
        return _lib.encode(config)
    if isinstance(config, Mapping):
        return _lib.encode(json.dumps(dict(config)))
    raise TypeError(f"a config is JSON text or a mapping, not {type(config).__name__}")


class Config:
    """A checked ``ec_transfer_config``.

    Args:
        config: the JSON document the engine takes as ``--ec-transfer-config``
            (text, or a mapping that is dumped to JSON).

    Raises:
        ConfigError, InvalidInputError: the library's message names the key,
            the value and what is allowed.

    Attributes:
        settings: every resolved setting by its name in the settings table
            (``ec_role``, ``ec_cpu_bytes``, ``ec_enable_nixl``, ``transport``...).
    """

    def __init__(self, config: ConfigLike) -> None:
        self.text = config_text(config)
        lib = _lib.lib()
        resolved = _lib.call_text(lib.ect_config_check_json, self.text, len(self.text))
        self.settings: Dict[str, Any] = json.loads(resolved or "{}")

    @property
    def role(self) -> str:
        """``ec_producer``, ``ec_consumer`` or ``ec_both``."""
        return self.settings["ec_role"]

    @property
    def p2p_enabled(self) -> bool:
        """Whether peer-to-peer transfer is on (``ec_enable_nixl``)."""
        return bool(self.settings["ec_enable_nixl"])

    @property
    def cpu_bytes(self) -> int:
        """The size of the CPU tier in bytes."""
        return int(self.settings["ec_cpu_bytes"])

    def __repr__(self) -> str:
        return f"<ectier.Config {self.role} {self.cpu_bytes} bytes p2p={self.p2p_enabled}>"
