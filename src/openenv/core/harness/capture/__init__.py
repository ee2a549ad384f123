"""Model-call capture: a recording proxy between a harness and the trainer's model endpoint."""

from openenv.core.harness.capture.dialects import APIType, detect

__all__ = ["APIType", "detect"]
