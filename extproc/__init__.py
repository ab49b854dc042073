"""Envoy Semantic Router: an Envoy external processor that routes OpenAI requests by content."""

__version__ = "0.1.0"
