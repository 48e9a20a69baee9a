"""Tasks for Django's task framework (`django.tasks` on Django 6, the `django_tasks` backport on 5.2)."""

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

from orders.models import Order


@task(queue_name="orders")
def order_total(order_id: int) -> int:
    return Order.objects.get(pk=order_id).total


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
async def add_later(a: int, b: int) -> int:
    return a + b


@task()
def refuse(reason: str) -> None:
    raise ValueError(reason)


@task(takes_context=True)
def attempt_number(context) -> int:
    return context.attempt
