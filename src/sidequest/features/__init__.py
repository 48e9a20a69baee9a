"""Features that plug into a job's lifecycle (unique, limiter, cancellation, results, metrics), and
those built on them (tasks, workflows, iteration, periodic).
"""
