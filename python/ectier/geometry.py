"""Block geometry of a CPU tier: row width, dtype, block size and count."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional, Union

from . import _lib


class Geometry:
    """The geometry of a tier (SPEC §3): one block holds one embedding row.

    Build one with :meth:`from_hidden_dim` or :meth:`from_hf_config`; the
    scheduler and worker sides expose theirs as ``.geometry``.

    Attributes:
        hidden_dim: elements per row (the deepstack rule applied).
        dtype: the ``torch.<name>`` spelling (``"torch.bfloat16"``).
        element_size, block_size_bytes, num_blocks, cpu_bytes: integers.
        hidden_dim_source, dtype_source, model_type: where the values came from.
    """

    def __init__(self, described: Mapping[str, Any]) -> None:
        self.hidden_dim = int(described["hidden_dim"])
        self.dtype = str(described["dtype"])
        self.element_size = int(described["element_size"])
        self.block_size_bytes = int(described["block_size_bytes"])
        self.num_blocks = int(described["num_blocks"])
        self.cpu_bytes = int(described["cpu_bytes"])
        self.hidden_dim_source = str(described.get("hidden_dim_source", ""))
        self.dtype_source = str(described.get("dtype_source", ""))
        self.model_type = str(described.get("model_type", ""))

    @classmethod
    def _from_spec(cls, spec: Mapping[str, Any]) -> "Geometry":
        text = _lib.encode(json.dumps(dict(spec)))
        out = _lib.call_text(_lib.lib().ect_geometry_json, text, len(text))
        return cls(json.loads(out or "{}"))

    @classmethod
    def from_hidden_dim(
        cls, hidden_dim: int, dtype: str, cpu_bytes: Union[int, str]
    ) -> "Geometry":
        """The geometry of a tier of ``cpu_bytes`` (an integer or a size
        text such as ``"8GiB"``) for rows of ``hidden_dim`` elements of
        ``dtype`` (``"bf16"``, ``"torch.float16"``, ...).

        Raises:
            ConfigError, InvalidInputError: a bad width, dtype or size.
        """
        return cls._from_spec({"hidden_dim": hidden_dim, "dtype": dtype, "cpu_bytes": cpu_bytes})

    @classmethod
    def from_hf_config(
        cls,
        config: Union[str, "os.PathLike[str]", Mapping[str, Any]],
        cpu_bytes: Union[int, str],
        dtype: Optional[str] = None,
    ) -> "Geometry":
        """The geometry for a model's HuggingFace ``config.json``.

        Args:
            config: a path to the file (or to a snapshot directory holding
                it), or its content as a mapping.
            cpu_bytes: the tier's size.
            dtype: the engine's dtype; None takes the one the file declares.

        Raises:
            ConfigError: a model config without the fields the width rule
                needs, or with contradicting ones (the message names them).
            NotFoundError, ResourceError: the file cannot be read.
        """
        spec: dict = {"cpu_bytes": cpu_bytes}
        if isinstance(config, Mapping):
            spec["hf_config"] = dict(config)
        else:
            spec["hf_config_path"] = os.fspath(config)
        if dtype is not None:
            spec["dtype"] = dtype
        return cls._from_spec(spec)

    @property
    def torch_dtype(self) -> Any:
        """The torch dtype object (imports torch)."""
        import torch

        return getattr(torch, self.dtype.split(".", 1)[1])

    def payload_bytes(self, tokens: int) -> int:
        """Bytes of an entry of ``tokens`` rows."""
        return tokens * self.block_size_bytes

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Geometry) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return (
            f"<ectier.Geometry hidden_dim={self.hidden_dim} dtype={self.dtype} "
            f"block={self.block_size_bytes} blocks={self.num_blocks}>"
        )
