"""Coding environment: Python run in a sandbox, optionally scored by hidden tests."""

from .client import CodingEnv
from .models import CodeAction, CodeObservation, CodeState, ExceptionInfo, TestResult

__all__ = ["CodeAction", "CodeObservation", "CodeState", "CodingEnv", "ExceptionInfo", "TestResult"]
