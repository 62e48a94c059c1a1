"""What is kept, the bottom layer of app/: every table (models.py, trace_models.py,
campaign_models.py), the database (database.py: engine, pragmas, `open_database`) and its
alembic migrations (migrations/), the append-only event log and its live fan-out (events.py),
and the limits every stored input fits (input_limits.py)."""
