"""wq: a work-queue engine (`wq daemon`) and the operator tools that talk to it."""

__version__ = "0.1.0"
