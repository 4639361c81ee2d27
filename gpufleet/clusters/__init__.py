"""Clusters as a whole: create and destroy, extend, cost, plan."""
