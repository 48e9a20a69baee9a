"""Scenario tests: real processes and topologies (kill -9, outages, Sentinel, Cluster, Ruby peers, a browser), named by scenario (see tests/README.md)."""
