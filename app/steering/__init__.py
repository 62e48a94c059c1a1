"""Steering: the strict judge, the goal, the triggers that pause a session, and suggested questions."""
