"""In-repo fakes of external services, served over real HTTP on loopback for tests."""
