"""The `socratic` command (cli.py) and its groups: serve and db (serve.py), bank (bank.py),
trace (trace.py), campaign (campaign.py); the harness's and the kernel family's commands are
theirs."""
