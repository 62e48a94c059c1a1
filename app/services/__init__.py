"""What the server holds while it runs, above the domain: the device queue (devices.py), the
evaluator that runs the harness on this machine or a cluster (evaluation.py), and
`ServerContext` (context.py), which carries them with the settings, database and event hub."""
