"""The shop's jobs: `manage.py sidequest worker` imports this module (every app's `jobs.py`)."""

from django.db import connection

import sidequest
from orders.models import Order


@sidequest.job(queue="orders", result_ttl=600, retry=0)
def send_receipt(order_id: int) -> str:
    order = Order.objects.get(pk=order_id)  # DoesNotExist if pushed before the commit
    order.receipt = f"receipt for order {order.number}: {order.total}"
    order.save(update_fields=["receipt"])
    return order.receipt


@sidequest.job(queue="orders", result_ttl=600, retry=0)
def connection_open_at_start() -> bool:
    """Whether this thread had a database connection open when the job started; then opens one."""
    was_open = connection.connection is not None
    Order.objects.count()
    return was_open
