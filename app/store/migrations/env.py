"""The one alembic environment of the server's database. It migrates SQLModel.metadata as
filled by app.store.database.load_models() (the app's tables and any other package's, such as the
question bank's). `socratic db revision -m MSG --autogenerate` writes a new revision here."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from app.store.database import load_models

config = context.config
target_metadata = load_models()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = engine_from_config(
        config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    with engine.connect() as conn:
        _run(conn)


def _run(connection: object) -> None:
    # render_as_batch: SQLite cannot ALTER most things; batch mode copies the table instead.
    context.configure(
        connection=connection, target_metadata=target_metadata, render_as_batch=True,  # type: ignore[arg-type]
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
