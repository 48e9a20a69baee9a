from django.urls import include, path
from orders import views

from sidequest.contrib.django import dashboard_urls

urlpatterns = [
    path("orders/", views.place_order),
    path("orders/abandoned/", views.abandon_order),
    path("orders/<int:order_id>/total/", views.order_total),
    path("sidequest/", include(dashboard_urls())),
]
