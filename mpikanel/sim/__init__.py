"""Discrete-event simulator: the engine on a virtual clock (``python -m mpikanel.sim``)."""
