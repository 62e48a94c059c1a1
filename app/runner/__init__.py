"""Running sessions: the state machine, the device queue, evaluations and the session runner."""
