"""Taking jobs from Redis and acknowledging them: the unit of work, basic and reliable fetch, queue
order, the batch list of jobs in hand and the acknowledger.
"""
