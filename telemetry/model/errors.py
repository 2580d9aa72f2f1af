"""Errors raised at once for misuse; each names the full scoped key it is about."""

from __future__ import annotations


class TelemetryError(ValueError):
    """Base class of rltel's usage errors."""


class ShapeMismatchError(TelemetryError):
    """A stat tensor's shape differs from its denominator mask's shape."""


class UnknownDenominatorError(TelemetryError):
    """``stat(denominator=...)`` names a denominator that was never declared."""


class MaskTypeError(TelemetryError):
    """A denominator mask is not a boolean tensor."""


class InvalidValueError(TelemetryError):
    """A value is empty, not a tensor/number, or otherwise unusable for its key."""


class KeyMismatchError(TelemetryError):
    """Ranks disagree on a key's reduce type or layout during the DP reduction."""


class ConfigError(TelemetryError):
    """A configuration value is unknown or invalid."""
