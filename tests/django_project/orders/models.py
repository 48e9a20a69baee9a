from django.db import models


class Order(models.Model):
    number = models.CharField(max_length=20, unique=True)
    total = models.IntegerField()
    receipt = models.TextField(blank=True)
