"""Fakes shared by the test suites (one container runtime: runtime.py)."""
