"""Signals: what the router knows about a request before it decides.

``specs`` holds the compiled, frozen signal definitions; ``rules`` the cheap ones computed
inline (keyword, context length); ``evaluator`` runs them all for a request, sending the
learned ones to the classifier engine.
"""
