"""Scenario tests, named by scenario: real processes and topologies (kill -9, outages, Sentinel,
Cluster, Ruby peers, a browser). See tests/README.md."""
