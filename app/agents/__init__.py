"""Agents the runner drives: the interface (base.py), the registry, and the scripted test agent."""
