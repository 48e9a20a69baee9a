"""Iterable (resumable) jobs, as Sidekiq 7.3's `Sidekiq::IterableJob`: a long job cut into items,
whose cursor is saved as it goes, so a shutdown, a deploy, a time limit or a `kill -9` resumes it
from the last saved cursor instead of from the start.

    class Reindex(sidequest.IterableJob):
        def build_enumerator(self, shard, *, cursor):
            return sidequest.iteration.range_items(0, 10_000, cursor=cursor)

        def each_iteration(self, n, shard):
            index(shard, n)

Parts: `job` (`IterableJob`, the loop and its stops), `state` (the `sidequest:iteration:<jid>`
hash: cursor and counts), `sources` (ready-made enumerators: a range, a list, a keyset query, a
CSV file). The admin API reads the state through `sidequest.api.Iteration`.
"""

from sidequest.features.iteration.job import Interrupted, IterableJob
from sidequest.features.iteration.sources import csv_rows, keyset_items, list_items, range_items
from sidequest.features.iteration.state import IterationState, read_state

__all__ = ["Interrupted", "IterableJob", "IterationState", "csv_rows", "keyset_items", "list_items",
           "range_items", "read_state"]
