"""Forward engines: what computes the raw next-token distribution for a session's prefix.

The stepper calls only :class:`ForwardEngine`; the local torch model is the one implementation.
"""

from __future__ import annotations

from app.engine.forward.base import ForwardEngine, RawDistribution, ServingModel
from app.engine.forward.local import LocalForward

__all__ = ["ForwardEngine", "LocalForward", "RawDistribution", "ServingModel"]
