"""The generic work-queue engine: storage, admission, processing; no HTTP, no types."""
