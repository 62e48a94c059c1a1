"""Specifications of the harness (harness/), one file per module or subject."""
