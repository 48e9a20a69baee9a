from django.db import transaction
from django.http import HttpRequest, JsonResponse

from orders import tasks
from orders.jobs import send_receipt
from orders.models import Order
from sidequest.contrib.django import enqueue_on_commit


def place_order(request: HttpRequest) -> JsonResponse:
    """Save an order and send its receipt once the order is committed."""
    with transaction.atomic():
        order = Order.objects.create(number=request.POST["number"], total=int(request.POST["total"]))
        enqueue_on_commit(send_receipt, order.pk)
    return JsonResponse({"id": order.pk})


def abandon_order(request: HttpRequest) -> JsonResponse:
    """The same, but the transaction rolls back: no order, and no job."""
    with transaction.atomic():
        order = Order.objects.create(number=request.POST["number"], total=int(request.POST["total"]))
        enqueue_on_commit(send_receipt, order.pk)
        transaction.set_rollback(True)
    return JsonResponse({"abandoned": True}, status=409)


def order_total(request: HttpRequest, order_id: int) -> JsonResponse:
    """Read an order's total in a worker, through Django's task framework."""
    result = tasks.order_total.enqueue(order_id)
    return JsonResponse({"result_id": result.id, "status": result.status})
