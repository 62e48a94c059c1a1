"""The Socratic harness: verifies and times single-file CUDA kernels over a scenario suite.

It is a library first (the web app is one client of it) and knows nothing about the app.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
