"""A small shop whose orders are processed by sidequest (see docs/integrations-django.md)."""
