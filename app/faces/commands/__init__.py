"""The `socratic` command (cli.py) and its groups: serve and db (serve.py), bank (bank.py),
trace (trace.py), campaign (campaign.py), lessons (lessons.py); options.py holds the flags they share. The
harness's and the kernel family's commands are theirs."""
