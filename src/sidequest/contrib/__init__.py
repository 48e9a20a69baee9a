"""Integrations: each imports its library lazily and is an optional extra; the core never imports contrib."""
