"""`manage.py sidequest`."""
