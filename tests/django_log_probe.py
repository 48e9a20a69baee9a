"""A job that logs on `django.tasks`, as Django 6's task framework does (the django-tasks backport
logs on `django_tasks` instead): contrib/test_django checks a worker prints such a line once."""

import logging

import sidequest


@sidequest.job(name="DjangoTasksLine")
def django_tasks_line(text):
    logging.getLogger("django.tasks").info("%s", text)
