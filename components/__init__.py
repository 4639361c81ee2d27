"""Cluster description, catalog and the Pulumi GPU fleet components (cloud SDKs imported lazily)."""
