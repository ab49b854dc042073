"""Classifier runtime: devices, batching, the shared encoder, heads and learned signals.

Constraint: never imports grpc or anything from `extproc/`; the router consumes only the names
re-exported here and `classifiers.engine.SignalEngine`.
"""

from classifiers.api import (
    BatchingSettings,
    Binding,
    ClassifierError,
    ClassifierSettings,
    ClassifierTimeout,
    DeviceError,
    LearnedSignalSpec,
    Overloaded,
    SignalScore,
)

__all__ = [
    "BatchingSettings",
    "Binding",
    "ClassifierError",
    "ClassifierSettings",
    "ClassifierTimeout",
    "DeviceError",
    "LearnedSignalSpec",
    "Overloaded",
    "SignalScore",
]
