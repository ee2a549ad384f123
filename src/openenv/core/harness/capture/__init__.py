"""Model-call capture: a recording proxy between a harness and the trainer's model endpoint
(`CaptureServer`), and the dialect helpers it shares with the model stand-in."""

from openenv.core.harness.capture.dialects import APIType, detect
from openenv.core.harness.capture.server import (
    CaptureServer,
    ModelCall,
    UpstreamError,
    create_app,
)

__all__ = ["APIType", "CaptureServer", "ModelCall", "UpstreamError", "create_app", "detect"]
